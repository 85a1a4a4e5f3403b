-- Notes rows this transaction wrote to a partitioned queue (requeue_poisoned moving rows to the tail
-- of their keys; a producer's INSERT does the same in its generated heads trigger, see
-- outbox._install_heads_trigger) for its commit step. The transaction's first note inserts its row
-- of outbox.commit_hooks, which queues the commit step (outbox.tg_queue__commit) at COMMIT, with the
-- note in it: the usual transaction, one statement, writes no other row. Each later note is one
-- row of outbox.commit_notes, inserted and never updated, so a statement costs the same however
-- many came before it; the first of them marks the hook (more_notes), so that the commit step
-- reads outbox.commit_notes only then. A rolled back savepoint takes its notes with it, like its
-- rows (and its hook, or its mark: a later note inserts it again). It takes no lock a producer could wait for:
-- what protects its uncommitted rows from a claim that finds their partition empty is the commit
-- step's (see outbox.tg_queue__commit and outbox._refresh_heads). Nothing else writes these
-- tables, so a producer can not forge a note.
-- A SERIALIZABLE transaction notes in its hook instead (appended per statement): its commit step
-- must find its notes without an index scan, whose predicate lock on the page other producers'
-- notes go into makes unrelated SERIALIZABLE producers fail as a read/write cycle (see
-- outbox.tg_queue__commit). Its statements then cost in proportion to the notes before them.
-- Arguments: the queue table, and its rows' keys and ids (aligned).
CREATE OR REPLACE FUNCTION outbox._note_written(p_table oid, p_keys text[], p_ids bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_more boolean;
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    IF pg_catalog.cardinality(p_ids) > 0 THEN
      INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
      VALUES (pg_catalog.pg_current_xact_id(), pg_catalog.array_fill(p_table, ARRAY[pg_catalog.cardinality(p_ids)]),
              p_keys, p_ids)
      ON CONFLICT (xid) DO UPDATE
        SET table_oids = h.table_oids || EXCLUDED.table_oids, keys = h.keys || EXCLUDED.keys, ids = h.ids || EXCLUDED.ids;
    END IF;
    RETURN;
  END IF;
  IF COALESCE(pg_catalog.cardinality(p_ids), 0) = 0 THEN
    RETURN;
  END IF;
  -- Marked by the first later note's update (true comes back only from it; nothing from later ones).
  INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
  VALUES (pg_catalog.pg_current_xact_id(), pg_catalog.array_fill(p_table, ARRAY[pg_catalog.cardinality(p_ids)]),
          p_keys, p_ids)
  ON CONFLICT (xid) DO UPDATE SET more_notes = true WHERE NOT h.more_notes
  RETURNING h.more_notes INTO v_more;
  IF v_more OR NOT FOUND THEN
    INSERT INTO outbox.commit_notes (table_oid, keys, ids) VALUES (p_table, p_keys, p_ids);
  END IF;
END;
$$;
