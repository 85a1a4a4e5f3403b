-- create_queue run again with a larger max_attempts does not resurrect rows poisoned under the old
-- limit (issue 30, item 4): 'register' of key x poisoned, 'unregister' of x sent after it; raising
-- the limit must not hand 'register' out again in front of what followed it. The rows stay
-- poisoned (attempt_count at the new limit) until requeue_poisoned, which moves them to the tail
-- of their keys. Likewise on an unpartitioned queue, and for a row poisoned by a lowered limit.
BEGIN;
SELECT plan(10);

SELECT test_helpers.new_queue('k', max_attempts => 1) AS q \gset
SELECT outbox.enqueue(:'q', 'register', '{}', 'x') AS register \gset
SELECT outbox.enqueue(:'q', 'unregister', '{}', 'x') AS unregister \gset
SELECT count(*) AS _ FROM outbox.claim_batch(:'q', 10) c
WHERE outbox.apply_result(:'q', c.id, c.lease_token, 'permanent', 'rejected') \gset
SELECT results_eq(format('SELECT event_type FROM outbox.claim_batch(%L, 10)', :'q'),
  $$VALUES ('unregister'::text)$$, 'with register poisoned, unregister is the head of x');
SELECT test_helpers.expire_leases(:'q') AS _ \gset
SELECT count(*) AS _ FROM outbox.claim_batch(:'q', 10) c
WHERE outbox.apply_result(:'q', c.id, c.lease_token, 'sent') \gset

SELECT outbox.create_queue(:'q', 'k', max_attempts => 5);
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'q'),
  'after max_attempts 5 no claim hands register out again in front of unregister');
SELECT results_eq(format('SELECT id, attempt_count, last_error FROM %s WHERE sent_at IS NULL', :'q'),
  format('VALUES (%s::bigint, 5, %L::text)', :register, 'rejected'),
  'register stays poisoned: its attempt count follows the new limit, its error is kept');
SELECT results_eq(format('SELECT poisoned, pending FROM outbox.stats(%L)', :'q'),
  $$VALUES (1::bigint, 0::bigint)$$, 'stats count it as poisoned, not pending');
SELECT outbox.create_queue(:'q', 'k', max_attempts => 5);
SELECT is(test_helpers.row_json(:'q', :register)->>'attempt_count', '5', 'create_queue again with the same limit leaves it as it is');

SELECT is(outbox.requeue_poisoned(:'q'), 1::bigint, 'requeue_poisoned gives it a fresh start');
SELECT results_eq(format('SELECT event_type, id > %s FROM outbox.claim_batch(%L, 10)', :unregister, :'q'),
  $$VALUES ('register'::text, true)$$, '... at the tail of its key, after unregister');
SELECT is_empty(format('SELECT * FROM outbox.repair(%L, true)', :'q'), 'nothing is left for the repair pass');

-- Unpartitioned: the same.
SELECT test_helpers.new_queue(max_attempts => 1) AS u \gset
SELECT test_helpers.add(:'u', 2) AS uids \gset
SELECT count(*) AS _ FROM outbox.claim_batch(:'u', 1) c
WHERE outbox.apply_result(:'u', c.id, c.lease_token, 'permanent', 'rejected') \gset
SELECT outbox.create_queue(:'u', max_attempts => 3);
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'u'),
  format('VALUES (%s::bigint)', (:'uids'::bigint[])[2]),
  'an unpartitioned queue keeps its poisoned row poisoned under a raised limit too');

-- A row poisoned by a lowered limit stays poisoned when the limit goes back up.
SELECT test_helpers.new_queue('k', max_attempts => 5) AS l \gset
SELECT outbox.enqueue(:'l', 'e', '{}', 'y') AS lid \gset
SELECT count(*) AS _ FROM outbox.claim_batch(:'l', 10) c
WHERE outbox.apply_result(:'l', c.id, c.lease_token, 'transient', '503') \gset
SELECT outbox.create_queue(:'l', 'k', max_attempts => 1);
SELECT outbox.create_queue(:'l', 'k', max_attempts => 5);
SELECT test_helpers.end_backoff(:'l') AS _ \gset
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'l'),
  'a row poisoned by a lowered limit is not resurrected by raising it again');

SELECT * FROM finish();
ROLLBACK;
