-- When a queue's producers NOTIFY its channel:
--   'always': every insert of an unpartitioned queue, every commit that made a partition of a
--     partitioned queue claimable. Any LISTENing client is woken.
--   'when_waiting' (the default for queues created since 00024): only while a drainer waits for a
--     NOTIFY, which it says with outbox.drainer_waits
--     before it sleeps (and outbox.drainer_woke when a NOTIFY woke it). NOTIFY takes a cluster-wide
--     lock from commit until the commit's WAL flush is done, so concurrent producers that notify
--     commit one at a time; while the drainers are busy nobody needs one. The Go drainer does this
--     by itself; another client that only LISTENs is then woken only by its own polling.
-- Owner only, like create_queue (it replaces the queue's NOTIFY trigger). Idempotent; kept when
-- create_queue runs again.
CREATE OR REPLACE FUNCTION outbox.set_notify(queue text, notify text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  IF notify IS NULL OR notify NOT IN ('always', 'when_waiting') THEN
    RAISE EXCEPTION 'set_notify: notify must be ''always'' or ''when_waiting'', got %',
      COALESCE(pg_catalog.quote_literal(notify), 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('set_notify', queue);
  -- It makes the queue's sequences when they are missing: the caller's (outbox._check_caller).
  PERFORM outbox._check_caller('set_notify');
  UPDATE outbox.queues q SET notify = set_notify.notify WHERE q.queue_id = v_q.queue_id
  RETURNING q.* INTO v_q;
  PERFORM outbox._install_notify_trigger(v_q);
END;
$$;
