-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), queued by the first note of a transaction (see
-- outbox._note_written and the generated heads triggers), fires at COMMIT. It takes every note of
-- the transaction (the first statement's are in the hook, which it deletes anyway: a transaction
-- of one statement reads and deletes nothing else) and hands each partitioned queue's keys and ids to
-- outbox._commit_keys in queue_id order: the commit locks of all transactions are taken in one
-- global order, and committing transactions never deadlock. The usual transaction, one row written
-- in one statement under READ COMMITTED, is done here in scalar statements (see below).
-- Immediate constraints (SET CONSTRAINTS ALL IMMEDIATE, which ORMs and migration tools issue) fire
-- it inside the producing statement that queued it (trigger depth above 1): it then defers itself
-- to COMMIT (sets its own constraint DEFERRED and queues itself again) and takes no lock. Run there,
-- it would hold its commit locks until the transaction ends, and two producers writing two keys in
-- opposite order would deadlock (issue 29). SET CONSTRAINTS ... IMMEDIATE after rows were written
-- still runs it at once, at depth 1 (its locks are then held until the transaction ends); rows
-- written after that queue it again, for COMMIT.
-- Few statements, each simple, by index (these tables churn, and their statistics say they are
-- empty): every one is an executor start on the producer's write path, and so is every function
-- called and every planner setting it pins (a function of its own for the one-row path, with its
-- settings, cost about 30 µs of a 110 µs commit step).
CREATE OR REPLACE FUNCTION outbox.tg_queue__commit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
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
  v_hooked record;
  v_key text;
  v_id bigint;
  v_head bigint;
  v_floor bigint;
  v_write_clock boolean;
  v_exists boolean;
  v_sure boolean;
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
    -- With the queue of the first statement's table, in the same statement. The transaction may
    -- have dropped a table it wrote: nothing of it is left to order.
    DELETE FROM outbox.commit_hooks h WHERE h.xid = NEW.xid
    RETURNING h.table_oids, h.keys, h.ids, h.more_notes,
              (SELECT q FROM outbox.queues q
               WHERE q.table_oid = h.table_oids[1] AND q.partition_column IS NOT NULL
                 AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL) AS q
      INTO v_hooked;
    v_oids := v_hooked.table_oids;
    v_keys := v_hooked.keys;
    v_ids := v_hooked.ids;
    v_more := v_hooked.more_notes;
    -- (No notes in the hook: a heads trigger made before 00025 notes every statement in
    -- outbox.commit_notes.)
    IF v_more OR v_ids IS NULL THEN
      -- The whole row (RETURNING n), not its columns: an array of the CTE's own row type would be
      -- converted to outbox.commit_notes[] through text, element by element (about 3 µs a commit).
      WITH taken AS (DELETE FROM outbox.commit_notes n WHERE n.xid = NEW.xid RETURNING n)
      SELECT pg_catalog.array_agg(t.n) INTO v_notes FROM taken t;
    ELSE
      -- One statement (the usual transaction): its keys and ids as noted.
      v_q := v_hooked.q;
      IF v_q.queue_id IS NULL OR pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN NULL;
      END IF;
      IF pg_catalog.cardinality(v_ids) > 1 OR pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, false);
        RETURN NULL;
      END IF;
      -- One row, READ COMMITTED: the steps of outbox._commit_keys in scalar statements.
      v_key := v_keys[1];
      v_id := v_ids[1];
      -- The commit lock of the key's hash, without writing the clock unless a REPEATABLE READ or
      -- SERIALIZABLE producer of the queue may be open (outbox._snapshot_producers_open, inline:
      -- the session lock taken and let go of in one expression, see there).
      v_write_clock := NOT (pg_catalog.pg_try_advisory_lock(outbox._snapshot_lock_class(), v_q.queue_id)
                            AND pg_catalog.pg_advisory_unlock(outbox._snapshot_lock_class(), v_q.queue_id));
      INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
      VALUES (v_q.queue_id, pg_catalog.hashtext(v_key) & 65535,
              GREATEST(v_q.clock_base, LEAST(v_id, pg_catalog.pg_sequence_last_value(v_q.id_sequence))),
              v_q.clock_base)
      ON CONFLICT (queue_id, slot) DO UPDATE
        SET previous_max = c.committed_max,
            committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
        WHERE v_write_clock;
      -- A new statement: its snapshot sees every commit that released the lock. Late when another
      -- transaction committed a row of the key with a larger id (outbox._late_rows). Asked before
      -- the head is read: a claim may raise the floor of a head we hold (docs/ordering.md, "One
      -- floor raise needs no lock") only by moving it on to a row that our question, coming first,
      -- sees pending. No id given out since ours (read under the lock): nobody committed a larger
      -- one, no question.
      IF pg_catalog.pg_sequence_last_value(v_q.id_sequence) > v_id
         AND (outbox._late_rows(v_q, v_keys, v_ids, v_ids))[1] IS NOT NULL THEN
        v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, true);
        RETURN NULL;
      END IF;
      -- The head, held until we commit (none when a claim holds it).
      SELECT x.head_id, x.floor_id INTO v_head, v_floor
      FROM outbox.partition_heads x
      WHERE x.queue_id = v_q.queue_id AND x.partition_key = v_key
      FOR KEY SHARE SKIP LOCKED;
      IF FOUND THEN
        -- A head with rows below a floor that is not above us (the usual case for a key with a
        -- backlog): done. Else a head to wake or a floor to lower.
        IF v_head IS NULL OR v_floor > v_id THEN
          v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, true);
        END IF;
        RETURN NULL;
      END IF;
      -- No head we could hold. One that exists (a claim holds it) is left to outbox._commit_keys,
      -- also one a claim's open transaction deleted: the probe above skips it (locked), this
      -- snapshot still sees it, and an insert of the key would wait on that transaction's index
      -- entry (issue 29: a lock-mode batch that delivered a key's last row held its producers at
      -- COMMIT). A new key's floor is its id only while the queue's heads are complete and no wake
      -- note waits for the key (the reasons are on outbox._make_heads). One statement for the three
      -- questions.
      SELECT EXISTS (SELECT 1 FROM outbox.partition_heads x WHERE x.queue_id = v_q.queue_id AND x.partition_key = v_key),
             EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id)
             AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                             WHERE w.queue_id = v_q.queue_id AND w.partition_key = v_key)
        INTO v_exists, v_sure;
      IF v_exists THEN
        v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, true);
        RETURN NULL;
      END IF;
      -- A new key (the other usual case): its head, made as outbox._commit_keys makes it.
      IF NOT outbox._make_head(v_q.queue_id, v_key, v_id, CASE WHEN v_sure THEN v_id ELSE 0 END) THEN
        -- Made meanwhile by another session, maybe a claim's open transaction: a wake note.
        INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id) VALUES (v_q.queue_id, v_key, v_id);
      END IF;
      IF outbox._drainer_waits(v_q) THEN
        PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
      END IF;
      RETURN NULL;
    END IF;
  END IF;
  -- Many statements, maybe several queues (or a SERIALIZABLE transaction's hook): each queue's
  -- keys and ids, merged. The registry is probed by index per table (LATERAL): as a join, a
  -- registry bloated by dead rows (queues made and dropped, a long-held xmin) was read whole.
  FOR v_merged IN
    SELECT r.q, m.keys, m.ids
    FROM (SELECT u.table_oid, pg_catalog.array_agg(u.k) AS keys, pg_catalog.array_agg(u.id) AS ids
          FROM (SELECT n.table_oid, x.k, x.id
                FROM pg_catalog.unnest(v_notes) n CROSS JOIN LATERAL unnest(n.keys, n.ids) AS x(k, id)
                UNION ALL
                SELECT * FROM unnest(v_oids, v_keys, v_ids)) AS u(table_oid, k, id)
          GROUP BY u.table_oid) m
    CROSS JOIN LATERAL (SELECT q FROM outbox.queues q
                        WHERE q.table_oid = m.table_oid AND q.partition_column IS NOT NULL
                          AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
                        OFFSET 0) r
    ORDER BY (r.q).queue_id
  LOOP
    v_notified := outbox._commit_keys(v_merged.q, v_merged.keys, v_merged.ids, v_merged.ids, false);
  END LOOP;
  RETURN NULL;
END;
$$;
