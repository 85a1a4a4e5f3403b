-- A drainer of a queue that notifies 'when_waiting' (outbox.set_notify) says it is about to wait up
-- to `wait` for a NOTIFY, so that producers send one. Returns its mark, a number that is 0 when the
-- queue notifies 'always' (nothing to say: wait as usual) and NULL when a producer is between its
-- check and its commit: then look again soon (claim, and call this again), do not wait long. After
-- a mark, claim once more before waiting: rows that committed before the mark sent no NOTIFY. Pass
-- the mark to outbox.drainer_woke when a NOTIFY wakes the drainer.
-- Why nothing is missed: a producer checks for a mark holding the queue's notify gate shared until
-- it commits (outbox._drainer_waits); this takes the gate exclusively without waiting, so it marks
-- only when no producer is between its check and its commit, and each producer either sees the mark
-- (and notifies) or committed before it (and the claim after the mark sees its rows); a producer
-- that finds the gate held notifies without looking.
-- The gate is held for the call only, whatever transaction it runs in and however the call ends
-- (a cancel too). Drainers exclude each other
-- with a lock of their own (key -5, as outbox.drainer_woke, which clears a mark without the gate):
-- a mark waits up to 100 ms for it, else answers NULL like a held gate.
-- Marks only grow: a later mark replaces an earlier one, even a longer one, so drainer_woke of a
-- drainer never clears another's mark.
CREATE OR REPLACE FUNCTION outbox.drainer_waits(queue text, wait interval)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
  v_mark bigint;
BEGIN
  PERFORM outbox._check_span('drainer_waits', 'wait', wait);
  IF wait IS NULL OR wait <= interval '0' OR wait > interval '1 day' THEN
    RAISE EXCEPTION 'drainer_waits: wait must be positive and at most 1 day, got %', COALESCE(wait::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_waits', queue);
  IF v_q.notify = 'always' THEN
    RETURN 0;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL THEN
    RAISE EXCEPTION 'drainer_waits: queue % has no sequence outbox.drainer_waits_q% (call outbox.set_notify again)',
      v_q.queue, v_q.queue_id USING ERRCODE = '55000';
  END IF;
  -- The gate, and the drainers' own lock, are transaction locks taken in a block that always ends
  -- by rolling back (a private error it catches): a subtransaction rolled back lets go of the locks
  -- taken in it, whatever ends it, and the mark (a sequence) stays. Session locks let go of by a
  -- later statement stayed held when a cancel came between (PL/pgSQL handles it between
  -- statements): the connection then held the gate, and drainers' marks, until it closed. Nor are
  -- they held for the caller's transaction (producers that must notify would notify all along).
  BEGIN
    IF pg_catalog.pg_try_advisory_xact_lock(1885823232 + v_q.queue_id, -4) THEN
      PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + v_q.queue_id, -5);
      v_mark := GREATEST(COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0) + 1,
                         (EXTRACT(epoch FROM pg_catalog.clock_timestamp() + wait) * 1000)::bigint);
      PERFORM pg_catalog.setval(v_sequence, v_mark);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'PDL01', MESSAGE = 'pgdrain: the notify locks are let go of';
  EXCEPTION WHEN SQLSTATE 'PDL01' THEN
    NULL;
  WHEN lock_not_available THEN
    v_mark := NULL;
  END;
  RETURN v_mark;
END;
$$;
