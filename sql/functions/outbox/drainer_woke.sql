-- A drainer that outbox.drainer_waits marked as waiting was woken by a NOTIFY: producers stop
-- notifying, unless another drainer marked itself since (marks only grow, so its mark is then not
-- this one: every drainer that LISTENs on the channel got the same NOTIFY, so clearing after one is
-- safe only when nobody marked after it). A mark of 0 (a queue that notifies 'always') does nothing.
-- Clearing needs no producer to be out of the way (it is a mark that ran out early, which the
-- protocol already allows: a drainer claims once more after every mark), so it does not take the
-- notify gate: producers that commit back to back hold it shared nearly all the time, and a clear
-- that needed it left every producer notifying, each commit queued on NOTIFY's lock, until the
-- mark ran out (PollFallback + 1 s; issue 29: producers beside one drainer at a quarter of their
-- rate). Drainers exclude each other with a lock of their own (key -5), held for the compare and
-- the setval only; one that waits 100 ms for it (someone else holds that key) lets the mark run out.
CREATE OR REPLACE FUNCTION outbox.drainer_woke(queue text, mark bigint)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '100ms'
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
  IF v_sequence IS NULL THEN
    RETURN;
  END IF;
  -- The drainers' lock held for this call only, however it ends (see outbox.drainer_waits).
  BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + v_q.queue_id, -5);
    IF pg_catalog.pg_sequence_last_value(v_sequence) = mark THEN
      PERFORM pg_catalog.setval(v_sequence, 1);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'PDL01', MESSAGE = 'pgdrain: the notify locks are let go of';
  EXCEPTION WHEN SQLSTATE 'PDL01' OR lock_not_available THEN
    NULL;
  END;
END;
$$;
