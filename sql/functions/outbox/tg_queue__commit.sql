-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), queued by the first note of a transaction (see
-- outbox._note_written and the generated heads triggers), fires at COMMIT. It takes every note of
-- the transaction (the first statement's are in the hook, which it deletes anyway: a transaction
-- of one statement reads and deletes nothing else) and hands each partitioned queue's keys and ids to outbox._commit_partitions in
-- queue_id order: the commit locks of all transactions are taken in one global order, and
-- committing transactions never deadlock.
-- Immediate constraints (SET CONSTRAINTS ALL IMMEDIATE, which ORMs and migration tools issue) fire
-- it inside the producing statement that queued it (trigger depth above 1): it then defers itself
-- to COMMIT (sets its own constraint DEFERRED and queues itself again) and takes no lock. Run there,
-- it would hold its commit locks until the transaction ends, and two producers writing two keys in
-- opposite order would deadlock (issue 29). SET CONSTRAINTS ... IMMEDIATE after rows were written
-- still runs it at once, at depth 1 (its locks are then held until the transaction ends); rows
-- written after that queue it again, for COMMIT.
-- Few statements, each simple, by index (these tables churn, and their statistics say they are
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
  v_notes outbox.commit_notes[];
  v_q outbox.queues;
  v_merged record;
  v_notified boolean;
  v_hook tid;
  v_oids oid[];
  v_keys text[];
  v_ids bigint[];
  v_requeued outbox.commit_hooks;
  v_more boolean;
BEGIN
  IF pg_catalog.pg_trigger_depth() > 1 THEN
    SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
    -- Found by the arbiter and moved by ctid, as below: no predicate lock in SERIALIZABLE.
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (NEW.xid)
    ON CONFLICT (xid) DO UPDATE SET xid = EXCLUDED.xid
    RETURNING h.ctid INTO v_hook;
    DELETE FROM outbox.commit_hooks h WHERE h.ctid = v_hook RETURNING h.* INTO v_requeued;
    INSERT INTO outbox.commit_hooks VALUES (v_requeued.*);
    RETURN NULL;
  END IF;
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- The notes are in the hook (outbox._note_written), which is found by the arbiter of its
    -- primary key and deleted by ctid: neither takes a predicate lock (an index scan would lock
    -- the page the next producer's hook goes into, a read/write dependency on it; three
    -- overlapping producers of unrelated keys then failed with 40001). No note rows to read.
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (NEW.xid)
    ON CONFLICT (xid) DO UPDATE SET xid = EXCLUDED.xid
    RETURNING h.ctid, h.table_oids, h.keys, h.ids INTO v_hook, v_oids, v_keys, v_ids;
    DELETE FROM outbox.commit_hooks h WHERE h.ctid = v_hook;
  ELSE
    -- The first statement's notes are in the hook (as a TRUNCATE in the transaction left them),
    -- later statements' in outbox.commit_notes (outbox._note_written).
    DELETE FROM outbox.commit_hooks h WHERE h.xid = NEW.xid
    RETURNING h.table_oids, h.keys, h.ids, h.more_notes INTO v_oids, v_keys, v_ids, v_more;
    -- (No notes in the hook: a heads trigger made before 00025 notes every statement in
    -- outbox.commit_notes.)
    IF v_more OR v_ids IS NULL THEN
      -- The whole row (RETURNING n), not its columns: an array of the CTE's own row type would be
      -- converted to outbox.commit_notes[] through text, element by element (about 3 µs a commit).
      WITH taken AS (DELETE FROM outbox.commit_notes n WHERE n.xid = NEW.xid RETURNING n)
      SELECT pg_catalog.array_agg(t.n) INTO v_notes FROM taken t;
    ELSE
      -- One statement (the usual transaction): its queue, and its keys and ids as noted.
      -- The transaction may have dropped a table it wrote: nothing of it is left to order.
      IF pg_catalog.cardinality(v_ids) > 0 THEN
        SELECT * INTO v_q FROM outbox.queues q
        WHERE q.table_oid = v_oids[1] AND q.partition_column IS NOT NULL
          AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL;
        IF FOUND THEN
          v_notified := outbox._commit_partitions(v_q, v_keys, v_ids);
        END IF;
      END IF;
      RETURN NULL;
    END IF;
  END IF;
  -- Many statements, maybe several queues (or a SERIALIZABLE transaction's hook): each queue's
  -- keys and ids, merged.
  FOR v_merged IN
    SELECT q, m.keys, m.ids
    FROM (SELECT u.table_oid, pg_catalog.array_agg(u.k) AS keys, pg_catalog.array_agg(u.id) AS ids
          FROM (SELECT n.table_oid, x.k, x.id
                FROM pg_catalog.unnest(v_notes) n CROSS JOIN LATERAL unnest(n.keys, n.ids) AS x(k, id)
                UNION ALL
                SELECT * FROM unnest(v_oids, v_keys, v_ids)) AS u(table_oid, k, id)
          GROUP BY u.table_oid) m
    JOIN outbox.queues q ON q.table_oid = m.table_oid
    WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
    ORDER BY q.queue_id
  LOOP
    v_notified := outbox._commit_partitions(v_merged.q, v_merged.keys, v_merged.ids);
  END LOOP;
  RETURN NULL;
END;
$$;
