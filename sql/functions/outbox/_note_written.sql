-- Notes rows this transaction wrote to a partitioned queue (requeue_poisoned moving rows to the tail
-- of their keys; a producer's INSERT does the same in its generated heads trigger, see
-- outbox._install_heads_trigger) for its commit step: each row's key and id go into this
-- transaction's row of outbox.commit_hooks for the table, whose deferred trigger runs the commit
-- step (outbox.tg_queue__commit) at COMMIT. One statement: the first note of a table inserts the
-- row (which queues the commit step), later ones append to it. A rolled back savepoint takes its
-- notes with it, like its rows. It takes no lock a producer could wait for: what protects its
-- uncommitted rows from a claim that finds their partition empty is the commit step's (see
-- outbox._commit_partitions and outbox._refresh_heads). Nothing else writes outbox.commit_hooks,
-- so a producer can not forge a note.
-- The lists stop growing at 1,024 entries (a transaction of many statements would copy them on
-- every one): only the span of ids, lo..hi, is kept then, and the commit step reads the keys from
-- this transaction's rows in it (outbox._noted_keys).
-- Arguments: the queue table, and its rows' keys and ids (aligned).
CREATE OR REPLACE FUNCTION outbox._note_written(p_table oid, p_keys text[], p_ids bigint[])
RETURNS void
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  INSERT INTO outbox.commit_hooks AS h (table_oid, keys, ids, lo, hi)
  SELECT p_table, p_keys, p_ids, pg_catalog.min(u.id), pg_catalog.max(u.id)
  FROM pg_catalog.unnest(p_ids) AS u(id)
  ON CONFLICT (xid, table_oid) DO UPDATE
    SET keys = CASE WHEN pg_catalog.cardinality(h.keys) + pg_catalog.cardinality(EXCLUDED.keys) <= 1024
                    THEN h.keys || EXCLUDED.keys END,
        ids = CASE WHEN pg_catalog.cardinality(h.keys) + pg_catalog.cardinality(EXCLUDED.keys) <= 1024
                   THEN h.ids || EXCLUDED.ids END,
        lo = LEAST(h.lo, EXCLUDED.lo),
        hi = GREATEST(h.hi, EXCLUDED.hi);
$$;
