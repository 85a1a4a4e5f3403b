-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), which fires at COMMIT for each note a transaction made (one
-- per queue table it wrote, outbox._note_written and the generated heads triggers). The first to
-- fire takes every note of the transaction (the others then find none) and hands each partitioned
-- queue's to outbox._commit_partitions in queue_id order: the commit locks of all transactions are
-- taken in one global order, and committing transactions never deadlock.
-- SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE runs it earlier (its locks are then held until
-- the transaction ends); rows written after that are noted, and queue it, again.
-- Few statements, each simple, by index (outbox.commit_hooks churns, and its statistics say it is
-- empty): every one is an executor start on the producer's write path.
CREATE OR REPLACE FUNCTION outbox.tg_queue__commit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
  v_note outbox.commit_hooks;
  v_notes outbox.commit_hooks[];
  v_q outbox.queues;
  v_queues outbox.queues[];
  v_notified boolean;
BEGIN
  FOR v_note IN DELETE FROM outbox.commit_hooks h WHERE h.xid = NEW.xid RETURNING h.* LOOP
    v_notes := v_notes || v_note;
  END LOOP;
  -- The transaction may have dropped a table it wrote: nothing of it is left to order.
  IF pg_catalog.cardinality(v_notes) = 1 THEN
    SELECT * INTO v_q FROM outbox.queues q
    WHERE q.table_oid = v_note.table_oid AND q.partition_column IS NOT NULL
      AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL;
    IF FOUND THEN
      v_notified := outbox._commit_partitions(v_q, v_note);
    END IF;
  ELSIF v_notes IS NOT NULL THEN
    SELECT pg_catalog.array_agg(q ORDER BY q.queue_id), pg_catalog.array_agg(n ORDER BY q.queue_id)
      INTO v_queues, v_notes
    FROM pg_catalog.unnest(v_notes) n
    JOIN outbox.queues q ON q.table_oid = n.table_oid
    WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL;
    FOR i IN 1 .. COALESCE(pg_catalog.cardinality(v_queues), 0) LOOP
      v_notified := outbox._commit_partitions(v_queues[i], v_notes[i]);
    END LOOP;
  END IF;
  RETURN NULL;
END;
$$;
