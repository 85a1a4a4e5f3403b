-- An operator skips a head that will never succeed (issue 30, item 3): poison_row poisons it with a
-- reason and its key moves on; requeue_poisoned still delivers it later, at the tail of its key.
-- Fenced: an attempt count the row no longer has, a live lease, a sent row change nothing; a worker
-- whose lease ran out before the skip has its late result refused. Logged (operator_log).
BEGIN;
SELECT plan(14);

SELECT test_helpers.new_queue('k', max_attempts => 5) AS q \gset
SELECT test_helpers.add(:'q', 3, 'x') AS x \gset
SELECT (:'x'::bigint[])[1] AS h1, (:'x'::bigint[])[2] AS h2, (:'x'::bigint[])[3] AS h3 \gset
SELECT count(*) AS _ FROM outbox.claim_batch(:'q', 10) c
WHERE outbox.apply_result(:'q', c.id, c.lease_token, 'transient', '503 from the peer') \gset

SELECT session_user::text AS me \gset
SELECT test_helpers.state(:'q') AS before \gset
SET LOCAL ROLE pgdrain_operator;
SELECT is(outbox.poison_row(:'q', :h1, 0, 'peer rejects this payload'), false,
          'an attempt count the row no longer has (it failed again since) is refused: false');
RESET ROLE;
SELECT is(test_helpers.state(:'q'), :'before', '... and nothing changed');

SET LOCAL ROLE pgdrain_operator;
SELECT is(outbox.poison_row(:'q', :h1, 1, 'peer rejects this payload'), true,
          'pgdrain_operator poisons the head with the attempt count it saw');
RESET ROLE;
SELECT results_eq(format('SELECT attempt_count, next_attempt_at, last_error FROM %s WHERE id = %s', :'q', :h1),
  format($$VALUES (5, NULL::timestamptz, %L::text)$$, 'poisoned by ' || :'me' || ': peer rejects this payload (last error: 503 from the peer)'),
  'the head is poisoned: attempt_count at max_attempts, who and why in last_error, the peer''s error kept');
CREATE TEMP TABLE c2 ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10, '1 minute');
SELECT results_eq('SELECT id FROM c2', format('VALUES (%s::bigint)', :h2), 'its key moves on: the next row is claimed');
SELECT results_eq(format('SELECT action, id, partition_key, attempt_count, reason, acted_by FROM outbox.operator_log(%L)', :'q'),
  format($$VALUES ('poison'::text, %s::bigint, 'x'::text, 1, 'peer rejects this payload'::text, %L::text)$$, :h1, :'me'),
  'the action is logged with the row, its key, the attempt count, the reason and the login role');

-- A row a worker delivers right now is not taken; one whose lease ran out is, and that worker's
-- late result is refused.
SELECT test_helpers.state(:'q') AS before \gset
SELECT is(outbox.poison_row(:'q', :h2, 0, 'stop'), false, 'a row with a live lease is refused: false');
SELECT is(test_helpers.state(:'q'), :'before', '... and nothing changed');
SELECT lease_token AS t2 FROM c2 \gset
SELECT test_helpers.expire_leases(:'q') AS _ \gset
SELECT is(outbox.poison_row(:'q', :h2, 0, 'stop'), true, 'once its lease ran out, it is poisoned');
SELECT test_helpers.row_json(:'q', :h2) AS poisoned_h2 \gset
SELECT is(outbox.apply_result(:'q', :h2, :'t2', 'sent'), false, 'the stale token''s late result is refused');
SELECT is(test_helpers.row_json(:'q', :h2), :'poisoned_h2', '... and changed nothing');

SELECT throws_ok(format($$SELECT outbox.poison_row(%L, %s, 0, '  ')$$, :'q', :h3), '22023',
  'poison_row: reason must be a non-blank text of at most 1000 characters, got ''  ''', 'a blank reason is refused');
SELECT throws_ok(format($$SELECT outbox.poison_row(%L, %s, NULL, 'r')$$, :'q', :h3), '22023',
  'poison_row: attempt_count must be the row''s attempt count as last seen (0 or more), got NULL', 'an attempt count is required');

-- Requeued, the skipped rows come after what followed them.
SELECT outbox.requeue_poisoned(:'q') AS _ \gset
SELECT results_eq(format('SELECT event_type FROM outbox.claim_batch(%L, 10)', :'q'), $$VALUES ('e3'::text)$$,
  'requeue_poisoned puts them at the tail of their key: e3 first');

SELECT * FROM finish();
ROLLBACK;
