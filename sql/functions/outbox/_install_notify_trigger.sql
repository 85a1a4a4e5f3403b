-- Gives a queue its NOTIFY machinery as its registration says: the sequence in which drainers say
-- until when they wait (outbox.drainer_waits_q<queue_id>, UNLOGGED: not versioned, so a producer in
-- any snapshot reads the latest value, and moving it leaves no dead tuple and no WAL; after a crash
-- it starts from nothing, which reads as "nobody waits" while the drainers' LISTEN connections
-- reconnect, and reconnecting wakes them), readable by every producer; and for an unpartitioned
-- queue the statement trigger pgdrain_notify (outbox.tg_queue__notify), whose arguments say whether
-- it notifies always or only when a drainer waits. A partitioned queue has no NOTIFY trigger: its
-- commit step notifies (outbox._commit_keys). The arguments name the sequence, never carry its oid:
-- pg_dump writes them as they are, and a restored database gives the sequence another oid.
-- With it, the sequence in which its drainers take turns to claim while rows trickle in
-- (outbox.claim_turn_q<queue_id>, UNLOGGED for the same reasons; see outbox.claim_turn).
-- Made by create_queue and outbox.set_notify; dropped by drop_queue.
CREATE OR REPLACE FUNCTION outbox._install_notify_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  v_sequence constant text := 'outbox.' || pg_catalog.quote_ident('drainer_waits_q' || p_q.queue_id);
  v_rel constant regclass := p_q.table_oid::regclass;
BEGIN
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS %s', v_sequence);
  EXECUTE pg_catalog.format('GRANT SELECT ON SEQUENCE %s TO PUBLIC', v_sequence);
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_turn_q' || p_q.queue_id);
  -- A trigger in place is left as it is (outbox._trigger_in_place): dropping it locks the table.
  IF p_q.partition_column IS NULL AND outbox._trigger_in_place(v_rel, 'pgdrain_notify', 'outbox.tg_queue__notify()', 4,
       CASE WHEN p_q.notify = 'always' THEN ARRAY[p_q.channel, p_q.queue]
            ELSE ARRAY[p_q.channel, p_q.queue, p_q.queue_id::text, v_sequence] END) THEN
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = v_rel AND t.tgname = 'pgdrain_notify') THEN
    EXECUTE pg_catalog.format('DROP TRIGGER pgdrain_notify ON %s', v_rel);
  END IF;
  IF p_q.partition_column IS NOT NULL THEN
    RETURN;
  END IF;
  IF p_q.notify = 'always' THEN
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, p_q.channel, p_q.queue);
  ELSE
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L, %L, %L)', v_rel, p_q.channel, p_q.queue,
      p_q.queue_id, v_sequence);
  END IF;
END;
$$;
