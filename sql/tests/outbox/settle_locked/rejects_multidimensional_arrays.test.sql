-- settle_locked takes one-dimensional arrays: a multidimensional ids, outcomes or errors raises
-- 22023 naming the argument (not a raw 0A000 from deep inside) and records nothing.
BEGIN;
SELECT plan(5);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 2) AS r \gset
SELECT array_agg(id ORDER BY id) AS ids FROM outbox.claim_locked(:'q', 10) \gset
SELECT format('{{%s},{%s}}', (:'ids'::bigint[])[1], (:'ids'::bigint[])[2]) AS ids2 \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q', :'ids2', '{sent,sent}'), '22023',
  'settle_locked: ids must be a one-dimensional array, got 2 dimensions', 'settle_locked rejects two-dimensional ids');
SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q', :'ids', '{{sent,sent}}'), '22023',
  'settle_locked: outcomes must be a one-dimensional array, got 2 dimensions', 'settle_locked rejects two-dimensional outcomes');
SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L, %L)', :'q', :'ids', '{sent,sent}', '{{a},{b}}'), '22023',
  'settle_locked: errors must be a one-dimensional array, got 2 dimensions', 'settle_locked rejects two-dimensional errors');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'none of the rejected calls recorded anything');
SELECT is(outbox.settle_locked(:'q', :'ids', '{sent,sent}'), 2::bigint, 'the same rows as one-dimensional arrays are settled');

SELECT * FROM finish();
ROLLBACK;
