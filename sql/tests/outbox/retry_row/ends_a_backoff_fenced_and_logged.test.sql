-- An operator retries a backing-off row now (issue 30, item 3): retry_row ends its backoff (no
-- attempt counted) and a claim takes it at once. Fenced: an attempt count the row no longer has, a
-- row that is not backing off (due, leased, poisoned, sent) change nothing. Logged (operator_log).
BEGIN;
SELECT plan(10);

SELECT test_helpers.new_queue('k', max_attempts => 5, backoff_min => '1 hour', backoff_max => '2 hours') AS q \gset
SELECT test_helpers.add(:'q', 1, 'x') AS x \gset
SELECT test_helpers.add(:'q', 1, 'y') AS y \gset
SELECT (:'x'::bigint[])[1] AS rx, (:'y'::bigint[])[1] AS ry \gset
SELECT count(*) AS _ FROM outbox.claim_batch(:'q', 10) c WHERE c.id = :rx
  AND outbox.apply_result(:'q', c.id, c.lease_token, 'transient', '503') \gset
SELECT test_helpers.expire_leases(:'q') AS _ \gset
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10) WHERE id = %s', :'q', :rx), 'x backs off for an hour');

SELECT test_helpers.state(:'q') AS before \gset
SET LOCAL ROLE pgdrain_operator;
SELECT is(outbox.retry_row(:'q', :rx, 0), false, 'an attempt count the row no longer has is refused: false');
SELECT is(outbox.retry_row(:'q', :ry, 0), false, 'a row that is not backing off is refused: false');
RESET ROLE;
SELECT is(test_helpers.state(:'q'), :'before', '... and nothing changed');

SET LOCAL ROLE pgdrain_operator;
SELECT is(outbox.retry_row(:'q', :rx, 1, 'peer fixed'), true, 'pgdrain_operator retries it now');
RESET ROLE;
SELECT results_eq(format('SELECT attempt_count, next_attempt_at, last_error FROM %s WHERE id = %s', :'q', :rx),
  $$VALUES (1, NULL::timestamptz, '503'::text)$$, 'its backoff is over, no attempt counted, its error kept');
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10) WHERE id = %s', :'q', :rx), format('VALUES (%s::bigint)', :rx),
  'a claim takes it at once (its head woke)');
SELECT is(outbox.retry_row(:'q', :rx, 1), false, 'a leased row is refused: false');
SELECT results_eq(format('SELECT action, id, attempt_count, reason FROM outbox.operator_log(%L)', :'q'),
  format($$VALUES ('retry'::text, %s::bigint, 1, 'peer fixed'::text)$$, :rx), 'the retry is logged, once');
SELECT throws_ok(format('SELECT outbox.retry_row(%L, NULL, 1)', :'q'), '22023', 'retry_row: id must not be NULL', 'an id is required');

SELECT * FROM finish();
ROLLBACK;
