-- Whether a producer of a queue that notifies 'when_waiting' (outbox.set_notify) must NOTIFY: a
-- drainer said it waits for one (outbox.drainer_waits) and has not been woken since. Takes the
-- queue's notify gate shared, held until the transaction ends: a drainer marks itself waiting only
-- while no producer holds it, so a producer that found no drainer waiting commits (its rows
-- visible) before any drainer can start to wait, and that drainer's claim after marking sees them.
-- Only tried: a gate a drainer holds (it is marking itself, or a cancelled call left it held on
-- its connection until that session's next call) answers true, and the producer notifies, which
-- is never wrong. It never waits for a drainer (a gate left held made every producer of the queue
-- wait at COMMIT until the drainer's connection closed). Queues that notify 'always' answer true
-- without a lock.
-- A producer's transaction that set pgdrain.notify to 'off' (SET LOCAL pgdrain.notify = off) never
-- notifies: a transaction that executed NOTIFY can not be prepared (PREPARE TRANSACTION, two-phase
-- commit), so such producers opt out, and drainers find their rows by their poll fallback.
-- Arguments: the queue, and its drainer_waits_q<queue_id> sequence.
CREATE OR REPLACE FUNCTION outbox._drainer_waits(p_q outbox.queues)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF pg_catalog.current_setting('pgdrain.notify', true) = 'off' THEN
    RETURN false;
  END IF;
  IF p_q.notify = 'always' THEN
    RETURN true;
  END IF;
  IF NOT pg_catalog.pg_try_advisory_xact_lock_shared(1885823232 + p_q.queue_id, -4) THEN
    RETURN true;
  END IF;
  RETURN COALESCE(pg_catalog.pg_sequence_last_value(
                    pg_catalog.to_regclass('outbox.drainer_waits_q' || p_q.queue_id)), 0)
         > (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint;
END;
$$;
