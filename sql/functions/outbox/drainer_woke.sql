-- A drainer that outbox.drainer_waits marked as waiting was woken by a NOTIFY: producers stop
-- notifying, unless another drainer marked itself since (marks only grow, so its mark is then not
-- this one: every drainer that LISTENs on the channel got the same NOTIFY, so clearing after one is
-- safe only when nobody marked after it). Skipped when a producer holds the notify gate (the mark
-- then expires by itself). A mark of 0 (a queue that notifies 'always') does nothing.
CREATE OR REPLACE FUNCTION outbox.drainer_woke(queue text, mark bigint)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
BEGIN
  IF mark IS NULL OR mark < 0 THEN
    RAISE EXCEPTION 'drainer_woke: mark must be a mark outbox.drainer_waits returned (0 or more), got %',
      COALESCE(mark::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_woke', queue);
  IF mark = 0 OR v_q.notify = 'always' THEN
    RETURN;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL OR NOT pg_catalog.pg_try_advisory_lock(1885823232 + v_q.queue_id, -4) THEN
    RETURN;
  END IF;
  BEGIN
    IF pg_catalog.pg_sequence_last_value(v_sequence) = mark THEN
      PERFORM pg_catalog.setval(v_sequence, 1);
    END IF;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RAISE;
  END;
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
END;
$$;
