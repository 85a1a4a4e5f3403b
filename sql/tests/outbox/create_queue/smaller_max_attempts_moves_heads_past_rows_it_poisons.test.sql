-- create_queue run again with a smaller max_attempts poisons pending rows between the two limits;
-- a key whose head was such a row, parked for days by its backoff, has its next row claimable at
-- once (invariant 9: re-running create_queue with other settings strands nothing), not after the
-- backoff or the repair pass. Keys whose heads are below the new limit keep their backoff.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT outbox.enqueue(:'q', 'first', '{}', 'c') AS first \gset
SELECT outbox.enqueue(:'q', 'second', '{}', 'c') AS second \gset
SELECT outbox.enqueue(:'q', 'only', '{}', 'd') AS only \gset
-- Both heads fail once; the peer asks for 6 days.
SELECT count(*) AS _ FROM outbox.claim_batch(:'q', 10) c
WHERE outbox.apply_result(:'q', c.id, c.lease_token, 'transient', 'later', clock_timestamp() + interval '6 days') \gset
-- As if these rows had been committed by an earlier transaction: a claim in the transaction that
-- wrote them refreshes their keys' heads itself, which would hide a stale head.
DELETE FROM outbox.commit_notes WHERE xid = pg_current_xact_id();
DELETE FROM outbox.commit_hooks WHERE xid = pg_current_xact_id();
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'q'), 'both keys back off for 6 days');

SELECT outbox.create_queue(:'q', 'k', max_attempts => 1);
SELECT results_eq(format('SELECT poisoned FROM outbox.stats(%L)', :'q'), $$VALUES (2::bigint)$$,
  'the two rows with one attempt are poisoned under the new limit');
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'q'), format('VALUES (%s::bigint)', :second),
  'the next row of c is claimed at once');
SELECT is_empty(format('SELECT * FROM outbox.repair(%L, true)', :'q'), 'nothing left for the repair pass');

-- A limit lowered to above the heads' attempts leaves their backoff alone.
SELECT test_helpers.new_queue('k') AS q2 \gset
SELECT outbox.enqueue(:'q2', 'a', '{}', 'e') AS a \gset
SELECT outbox.enqueue(:'q2', 'b', '{}', 'e') AS b \gset
SELECT count(*) AS _ FROM outbox.claim_batch(:'q2', 10) c
WHERE outbox.apply_result(:'q2', c.id, c.lease_token, 'transient', 'later', clock_timestamp() + interval '6 days') \gset
DELETE FROM outbox.commit_notes WHERE xid = pg_current_xact_id();
DELETE FROM outbox.commit_hooks WHERE xid = pg_current_xact_id();
SELECT outbox.create_queue(:'q2', 'k', max_attempts => 5);
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'q2'), 'e still backs off (1 attempt of 5)');
SELECT is_empty(format('SELECT * FROM outbox.repair(%L, true)', :'q2'), 'and its head is as the repair pass would have it');

SELECT * FROM finish();
ROLLBACK;
