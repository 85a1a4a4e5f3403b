-- A transient failure backs off exponentially with jitter: the n-th retry waits between half and
-- all of backoff_min * 2^(n-1), never less than backoff_min and never more than backoff_max,
-- counted from the clock when the result is recorded (not from the transaction's start).
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue(max_attempts => 50, backoff_min => '10 seconds', backoff_max => '80 seconds') AS q \gset
SELECT test_helpers.add(:'q', 200) AS _ \gset

-- The clock just before and just after the last round of results: each row's backoff was counted
-- from a moment in between, so lo = min(next_attempt_at - before), hi = max(next_attempt_at - after).
CREATE TEMP TABLE round (before timestamptz, after timestamptz) ON COMMIT DROP;
CREATE FUNCTION pg_temp.fail_all(q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v_n bigint; v_before timestamptz;
BEGIN
  PERFORM test_helpers.end_backoff(q);
  v_before := clock_timestamp();
  SELECT count(*) INTO v_n FROM outbox.claim_batch(q, 1000) c
  WHERE outbox.apply_result(q, c.id, c.lease_token, 'transient');
  DELETE FROM round;
  INSERT INTO round VALUES (v_before, clock_timestamp());
  RETURN v_n;
END $$;
CREATE FUNCTION pg_temp.delays(q text) RETURNS TABLE(lo interval, hi interval, n bigint, distinct_n bigint)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE format('SELECT min(next_attempt_at - r.before), max(next_attempt_at - r.after), count(*),
                                      count(DISTINCT next_attempt_at) FROM %s, round r', q);
END $$;

SELECT is(pg_temp.fail_all(:'q'), 200::bigint, 'all 200 rows fail once');
SELECT ok(lo >= '10 seconds' AND hi <= '10 seconds', 'the first retry waits exactly backoff_min (10s)') FROM pg_temp.delays(:'q');
SELECT pg_temp.fail_all(:'q') AS _ \gset
SELECT ok(lo >= '10 seconds' AND hi <= '20 seconds', 'the second retry waits between 10s and 20s') FROM pg_temp.delays(:'q');
SELECT pg_temp.fail_all(:'q') AS _ \gset
SELECT ok(lo >= '20 seconds' AND hi <= '40 seconds', 'the third retry waits between 20s and 40s') FROM pg_temp.delays(:'q');
SELECT ok(distinct_n > 100, 'the delays are jittered (200 rows do not retry at the same instant)') FROM pg_temp.delays(:'q');
SELECT pg_temp.fail_all(:'q') AS _ \gset
SELECT ok(lo >= '40 seconds' AND hi <= '80 seconds', 'the fourth retry waits between 40s and 80s') FROM pg_temp.delays(:'q');
SELECT pg_temp.fail_all(:'q') AS _ \gset
SELECT pg_temp.fail_all(:'q') AS _ \gset
SELECT ok(lo >= '40 seconds' AND hi <= '80 seconds', 'later retries are capped at backoff_max (80s)') FROM pg_temp.delays(:'q');
SELECT is(test_helpers.ids_where(:'q', 'attempt_count <> 6'), '{}'::bigint[],
          'every row counted exactly six attempts');

-- backoff_min = backoff_max gives a fixed delay.
SELECT test_helpers.new_queue(backoff_min => '3 seconds', backoff_max => '3 seconds') AS f \gset
SELECT test_helpers.add(:'f', 20) AS _ \gset
SELECT pg_temp.fail_all(:'f') AS _ \gset
SELECT pg_temp.fail_all(:'f') AS _ \gset
SELECT pg_temp.fail_all(:'f') AS _ \gset
SELECT ok(lo >= '3 seconds' AND hi <= '3 seconds', 'with backoff_min = backoff_max every retry waits exactly that') FROM pg_temp.delays(:'f');

SELECT * FROM finish();
ROLLBACK;
