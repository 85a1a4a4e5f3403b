-- 'transient' adds one attempt with a backoff. On a partitioned queue it is capped at
-- max_attempts - 1 (a transient failure never poisons a partition head); on an unpartitioned
-- queue the row is poisoned when it reaches max_attempts.
BEGIN;
SELECT plan(10);

CREATE FUNCTION pg_temp.fail_once(q text, id bigint) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE v_token uuid;
BEGIN
  PERFORM test_helpers.end_backoff(q);
  SELECT c.lease_token INTO v_token FROM outbox.claim_batch(q, 10) c WHERE c.id = fail_once.id;
  IF v_token IS NULL THEN RETURN false; END IF;
  RETURN outbox.apply_result(q, id, v_token, 'transient', 'timeout');
END $$;

SELECT test_helpers.new_queue('k', max_attempts => 3) AS p \gset
SELECT test_helpers.add(:'p', 2, 'a') AS pa \gset
SELECT (:'pa'::bigint[])[1] AS pid \gset

SELECT ok(pg_temp.fail_once(:'p', :pid), 'a partitioned head fails transiently (1)');
SELECT results_eq(format('SELECT attempt_count, next_attempt_at > now(), last_error FROM %s WHERE id = %s', :'p', :pid),
                  $$VALUES (1, true, 'timeout'::text)$$,
                  'one transient failure: attempt_count 1, backing off, last_error recorded');
SELECT ok(pg_temp.fail_once(:'p', :pid) AND pg_temp.fail_once(:'p', :pid) AND pg_temp.fail_once(:'p', :pid)
          AND pg_temp.fail_once(:'p', :pid),
          'the head keeps being retried after four more transient failures');
SELECT results_eq(format('SELECT attempt_count, next_attempt_at > now() FROM %s WHERE id = %s', :'p', :pid),
                  $$VALUES (2, true)$$,
                  'on a partitioned queue attempt_count is capped at max_attempts - 1 and the row keeps backing off');
SELECT test_helpers.end_backoff(:'p') AS _ \gset
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'p'), format('VALUES (%s::bigint)', :pid),
                  'the head is still the head of its partition (never poisoned, its successor still waits)');

SELECT test_helpers.new_queue(max_attempts => 3) AS u \gset
SELECT test_helpers.add(:'u', 1) AS ua \gset
SELECT (:'ua'::bigint[])[1] AS uid \gset
SELECT ok(pg_temp.fail_once(:'u', :uid) AND pg_temp.fail_once(:'u', :uid), 'an unpartitioned row fails twice');
SELECT results_eq(format('SELECT attempt_count, next_attempt_at > now() FROM %s WHERE id = %s', :'u', :uid),
                  $$VALUES (2, true)$$, 'after two failures it backs off with attempt_count 2');
SELECT ok(pg_temp.fail_once(:'u', :uid), 'it fails a third time');
SELECT results_eq(format('SELECT attempt_count, next_attempt_at, last_error, lease_token, leased_until FROM %s WHERE id = %s', :'u', :uid),
                  $$VALUES (3, NULL::timestamptz, 'timeout'::text, NULL::uuid, NULL::timestamptz)$$,
                  'at max_attempts the unpartitioned row is poisoned: no next attempt, error kept, lease cleared');
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'u'), 'a poisoned row is never claimed');

SELECT * FROM finish();
ROLLBACK;
