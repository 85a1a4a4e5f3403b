-- An operator's note goes in front of the row's last error, and the whole is kept to its first 4000
-- characters, as apply_result keeps an error: a row poisoned, requeued and poisoned again, or
-- dismissed, does not grow last_error without bound. A reason of white space only (a tab, a
-- no-break space) is refused like a blank one, and changes nothing.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k', max_attempts => 5) AS q \gset
SELECT test_helpers.add(:'q', 1, 'x') AS x \gset
SELECT (:'x'::bigint[])[1] AS h1 \gset
SELECT count(*) AS _ FROM outbox.claim_batch(:'q', 10) c
WHERE outbox.apply_result(:'q', c.id, c.lease_token, 'transient', repeat('e', 5000)) \gset
SELECT session_user::text AS me \gset

SELECT test_helpers.state(:'q') AS before \gset
SELECT throws_ok(format($$SELECT outbox.poison_row(%L, %s, 1, E'\t')$$, :'q', :h1), '22023',
  E'poison_row: reason must be a non-blank text of at most 1000 characters, got ''\t''',
  'a reason of a tab only is refused');
SELECT throws_ok(format($$SELECT outbox.poison_row(%L, %s, 1, E'\u00a0 \n')$$, :'q', :h1), '22023', NULL,
  'a reason of a no-break space and a line break is refused');
SELECT is(test_helpers.state(:'q'), :'before', '... and nothing changed');

SELECT is(outbox.poison_row(:'q', :h1, 1, repeat('r', 1000)), true, 'a reason of 1000 characters poisons the row');
SELECT results_eq(format('SELECT length(last_error), last_error LIKE %L FROM %s WHERE id = %s',
                         'poisoned by ' || :'me' || ': rrr%', :'q', :h1),
  $$VALUES (4000, true)$$,
  'its note comes first and last_error keeps 4000 characters');

-- Requeued, failed for good (poisoned by the worker) and dismissed: still 4000.
SELECT outbox.requeue_poisoned(:'q') AS _ \gset
SELECT id AS h1b FROM outbox.claim_batch(:'q', 10) c
WHERE outbox.apply_result(:'q', c.id, c.lease_token, 'permanent', repeat('p', 4000)) \gset
SELECT is(outbox.dismiss_poisoned(:'q', ARRAY[:h1b]::bigint[], 'given up'), 1::bigint, 'dismissed');
SELECT results_eq(format('SELECT length(last_error), last_error LIKE %L FROM %s WHERE id = %s',
                         'dismissed by ' || :'me' || ': given up (last error: ppp%', :'q', :h1b),
  $$VALUES (4000, true)$$, 'a dismissed row keeps 4000 characters too');

SELECT * FROM finish();
ROLLBACK;
