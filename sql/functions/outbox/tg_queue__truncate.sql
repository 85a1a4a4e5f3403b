-- Statement-level AFTER TRUNCATE trigger (pgdrain_truncate) of every queue table: the rows are
-- gone, so is everything derived from them. Deletes the queue's partition heads (they would point
-- at rows that no longer exist, with floors above the ids a RESTART IDENTITY hands out again) and
-- its clocks (they would make every later commit "late") and wake notes, and forgets this transaction's note of the
-- table for its commit step (their rows went with the TRUNCATE). An empty table's heads are
-- complete: the built-mark stays, or is set when a rebuild after a crash was under way
-- (outbox._restore_heads), which ends here rather than go on past a key that is gone. TRUNCATE holds ACCESS EXCLUSIVE until the transaction ends, so no
-- producer or claim of the table is in flight; a rolled back TRUNCATE takes these deletes with it.
-- The queue is found by the table (TG_RELID), not by an argument, so re-registration never leaves
-- the trigger pointing elsewhere.
CREATE OR REPLACE FUNCTION outbox.tg_queue__truncate()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
-- (enable_seqscan = off makes a plan that cannot avoid a scan cost about 1e10, past the JIT
-- thresholds: it was compiled on every call, 0.15-1.6 s.)
SET jit = off
AS $$
BEGIN
  DELETE FROM outbox.partition_heads h USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND h.queue_id = q.queue_id;
  DELETE FROM outbox.partition_clocks c USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND c.queue_id = q.queue_id;
  DELETE FROM outbox.partition_wakes w USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND w.queue_id = q.queue_id;
  DELETE FROM outbox.partition_heads_restored r USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND r.queue_id = q.queue_id;
  INSERT INTO outbox.partition_heads_built (queue_id)
  SELECT q.queue_id FROM outbox.queues q WHERE q.table_oid = TG_RELID AND q.partition_column IS NOT NULL
  ON CONFLICT DO NOTHING;
  -- Ids still cached by sessions count as given out before this point (RESTART IDENTITY has already
  -- reset the sequence here, so the base is then where it starts again).
  UPDATE outbox.queues q SET clock_base = COALESCE(pg_catalog.pg_sequence_last_value(q.id_sequence), 0)
  WHERE q.table_oid = TG_RELID;
  DELETE FROM outbox.commit_notes n
  WHERE n.xid = pg_catalog.pg_current_xact_id_if_assigned() AND n.table_oid = TG_RELID;
  -- The first statement's notes (a SERIALIZABLE transaction's: all) are in its hook (outbox._note_written).
  UPDATE outbox.commit_hooks h
  SET (table_oids, keys, ids) = (
        SELECT pg_catalog.array_agg(u.table_oid ORDER BY u.n), pg_catalog.array_agg(u.k ORDER BY u.n),
               pg_catalog.array_agg(u.id ORDER BY u.n)
        FROM unnest(h.table_oids, h.keys, h.ids) WITH ORDINALITY AS u(table_oid, k, id, n)
        WHERE u.table_oid <> TG_RELID)
  WHERE h.xid = pg_catalog.pg_current_xact_id_if_assigned() AND TG_RELID = ANY (h.table_oids);
  RETURN NULL;
END;
$$;
