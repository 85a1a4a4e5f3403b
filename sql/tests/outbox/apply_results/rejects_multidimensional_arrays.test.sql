-- apply_results takes one-dimensional arrays: a multidimensional ids, lease_tokens, outcomes or
-- errors raises 22023 naming the argument (not a raw 0A000 from deep inside), and nothing in the
-- batch is recorded, even when the elements would otherwise line up.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 2) AS r \gset
CREATE TEMP TABLE b ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT array_agg(id ORDER BY id) AS ids, array_agg(lease_token ORDER BY id) AS toks FROM b \gset
SELECT format('{{%s},{%s}}', (:'ids'::bigint[])[1], (:'ids'::bigint[])[2]) AS ids2,
       format('{{%s},{%s}}', (:'toks'::uuid[])[1], (:'toks'::uuid[])[2]) AS toks2 \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', :'ids2', :'toks', '{sent,sent}'), '22023',
  'apply_results: ids must be a one-dimensional array, got 2 dimensions', 'apply_results rejects two-dimensional ids');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', :'ids', :'toks2', '{sent,sent}'), '22023',
  'apply_results: lease_tokens must be a one-dimensional array, got 2 dimensions', 'apply_results rejects two-dimensional lease_tokens');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', :'ids', :'toks', '{{sent},{sent}}'), '22023',
  'apply_results: outcomes must be a one-dimensional array, got 2 dimensions', 'apply_results rejects two-dimensional outcomes');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L, %L)', :'q', :'ids', :'toks', '{sent,sent}', '{{{a}},{{b}}}'), '22023',
  'apply_results: errors must be a one-dimensional array, got 3 dimensions', 'apply_results rejects three-dimensional errors');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'none of the rejected calls recorded anything');
SELECT results_eq(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', :'ids', :'toks', '{sent,sent}'),
                  format('VALUES (%s::bigint, true), (%s, true)', (:'ids'::bigint[])[1], (:'ids'::bigint[])[2]),
                  'the same batch as one-dimensional arrays is recorded');

SELECT * FROM finish();
ROLLBACK;
