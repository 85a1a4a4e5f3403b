-- Whether claims are rebuilding a partitioned queue's heads, and how far they are: crash recovery,
-- a standby's promotion or a restore without the unlogged tables' data empties the heads, and each
-- claim then rebuilds one part, keys in their order (outbox._restore_heads). Meanwhile a key no
-- part has reached waits for its part, and outbox.repair checks nothing, so that pgdrain check, a
-- drainer's gauges and an operator can say so rather than "every pending row is reachable", with
-- no privilege on the unlogged tables. rebuilt_through: the last key a part has done (NULL before
-- the first part, and when not rebuilding). An unpartitioned queue keeps no heads: never rebuilding.
CREATE OR REPLACE FUNCTION outbox.heads_rebuild(queue text)
RETURNS TABLE(rebuilding boolean, rebuilt_through text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('heads_rebuild', queue);
BEGIN
  IF v_q.partition_column IS NULL
     OR EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id) THEN
    RETURN QUERY SELECT false, NULL::text;
    RETURN;
  END IF;
  RETURN QUERY SELECT true, (SELECT r.after_key FROM outbox.partition_heads_restored r WHERE r.queue_id = v_q.queue_id);
END;
$$;
