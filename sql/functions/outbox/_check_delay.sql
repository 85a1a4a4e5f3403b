-- Validates a caller-chosen time of a row's next attempt (enqueue's deliver_at, a worker's
-- retry_at) against the queue's max_delay: at most max_delay after the clock, so that no producer
-- or peer can park a row (and on a partitioned queue every later event of its key) for ever. NULL
-- elements are fine (no time given). The queue table's CHECK pgdrain_next_attempt_at_within_max_delay
-- (outbox._guard_next_attempt_at) holds a plain INSERT or UPDATE to the same bound; this check comes
-- first so that a call names its argument (22023) instead of a constraint. p_elements: name the
-- element of an array argument in the message.
CREATE OR REPLACE FUNCTION outbox._check_delay(p_function text, p_argument text, p_q outbox.queues,
                                               p_times timestamptz[], p_elements boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_bad timestamptz;
  v_n bigint;
BEGIN
  IF p_times IS NULL THEN
    RETURN;
  END IF;
  SELECT u.at, u.n INTO v_bad, v_n
  FROM unnest(p_times) WITH ORDINALITY AS u(at, n)
  WHERE u.at > pg_catalog.clock_timestamp() + p_q.max_delay
  LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      '%s must be at most the queue''s max_delay (%s) from now, got %s%s', p_argument, p_q.max_delay, v_bad,
      CASE WHEN p_elements THEN pg_catalog.format(' (element %s)', v_n) ELSE '' END));
  END IF;
END;
$$;
