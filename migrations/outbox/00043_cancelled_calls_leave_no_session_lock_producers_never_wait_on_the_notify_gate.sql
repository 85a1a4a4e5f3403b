-- +goose Up
-- +goose StatementBegin
-- Whether a REPEATABLE READ or SERIALIZABLE transaction may be writing rows of the queue (it holds
-- the shared lock of outbox.tg_queue__snapshot_producer): a READ COMMITTED commit step then raises
-- its keys' clocks, which such a transaction reads to know it is late. Otherwise it only locks them:
-- a clock written on every commit piles up a version per commit of its key while any session holds
-- back the xmin horizon, and every later commit of the key walks them (issue 29).
-- A try of the exclusive lock, let go at once: another READ COMMITTED commit step trying at the same
-- instant makes it answer true, which only costs a clock write. Taken and let go of in one
-- expression: PL/pgSQL handles a cancel (or a statement_timeout) between two statements, and one
-- landing between the lock and the unlock left the session holding it, a REPEATABLE READ producer
-- of the queue then waiting for it until that connection closed.
-- Why no such transaction can miss a lock-only commit: docs/ordering.md.
CREATE OR REPLACE FUNCTION outbox._snapshot_producers_open(p_queue_id integer)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_class constant integer := outbox._snapshot_lock_class();
BEGIN
  RETURN NOT (pg_catalog.pg_try_advisory_lock(v_class, p_queue_id)
              AND pg_catalog.pg_advisory_unlock(v_class, p_queue_id));
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose StatementBegin
-- A drainer of a queue that notifies 'when_waiting' (outbox.set_notify) says it is about to wait up
-- to `wait` for a NOTIFY, so that producers send one. Returns its mark, a number that is 0 when the
-- queue notifies 'always' (nothing to say: wait as usual) and NULL when a producer is between its
-- check and its commit: then look again soon (claim, and call this again), do not wait long. After
-- a mark, claim once more before waiting: rows that committed before the mark sent no NOTIFY. Pass
-- the mark to outbox.drainer_woke when a NOTIFY wakes the drainer.
-- Why nothing is missed: a producer checks for a mark holding the queue's notify gate shared until
-- it commits (outbox._drainer_waits); this takes the gate exclusively without waiting, so it marks
-- only when no producer is between its check and its commit, and each producer either sees the mark
-- (and notifies) or committed before it (and the claim after the mark sees its rows); a producer
-- that finds the gate held notifies without looking.
-- The gate is held for the call only, whatever transaction it runs in and however the call ends
-- (a cancel too). Drainers exclude each other
-- with a lock of their own (key -5, as outbox.drainer_woke, which clears a mark without the gate):
-- a mark waits up to 100 ms for it, else answers NULL like a held gate.
-- Marks only grow: a later mark replaces an earlier one, even a longer one, so drainer_woke of a
-- drainer never clears another's mark.
CREATE OR REPLACE FUNCTION outbox.drainer_waits(queue text, wait interval)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
  v_mark bigint;
BEGIN
  PERFORM outbox._check_span('drainer_waits', 'wait', wait);
  IF wait IS NULL OR wait <= interval '0' OR wait > interval '1 day' THEN
    RAISE EXCEPTION 'drainer_waits: wait must be positive and at most 1 day, got %', COALESCE(wait::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_waits', queue);
  IF v_q.notify = 'always' THEN
    RETURN 0;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL THEN
    RAISE EXCEPTION 'drainer_waits: queue % has no sequence outbox.drainer_waits_q% (call outbox.set_notify again)',
      v_q.queue, v_q.queue_id USING ERRCODE = '55000';
  END IF;
  -- The gate, and the drainers' own lock, are transaction locks taken in a block that always ends
  -- by rolling back (a private error it catches): a subtransaction rolled back lets go of the locks
  -- taken in it, whatever ends it, and the mark (a sequence) stays. Session locks let go of by a
  -- later statement stayed held when a cancel came between (PL/pgSQL handles it between
  -- statements): the connection then held the gate, and drainers' marks, until it closed. Nor are
  -- they held for the caller's transaction (producers that must notify would notify all along).
  BEGIN
    IF pg_catalog.pg_try_advisory_xact_lock(1885823232 + v_q.queue_id, -4) THEN
      PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + v_q.queue_id, -5);
      v_mark := GREATEST(COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0) + 1,
                         (EXTRACT(epoch FROM pg_catalog.clock_timestamp() + wait) * 1000)::bigint);
      PERFORM pg_catalog.setval(v_sequence, v_mark);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'PDL01', MESSAGE = 'pgdrain: the notify locks are let go of';
  EXCEPTION WHEN SQLSTATE 'PDL01' THEN
    NULL;
  WHEN lock_not_available THEN
    v_mark := NULL;
  END;
  RETURN v_mark;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A drainer that outbox.drainer_waits marked as waiting was woken by a NOTIFY: producers stop
-- notifying, unless another drainer marked itself since (marks only grow, so its mark is then not
-- this one: every drainer that LISTENs on the channel got the same NOTIFY, so clearing after one is
-- safe only when nobody marked after it). A mark of 0 (a queue that notifies 'always') does nothing.
-- Clearing needs no producer to be out of the way (it is a mark that ran out early, which the
-- protocol already allows: a drainer claims once more after every mark), so it does not take the
-- notify gate: producers that commit back to back hold it shared nearly all the time, and a clear
-- that needed it left every producer notifying, each commit queued on NOTIFY's lock, until the
-- mark ran out (PollFallback + 1 s; issue 29: producers beside one drainer at a quarter of their
-- rate). Drainers exclude each other with a lock of their own (key -5), held for the compare and
-- the setval only; one that waits 100 ms for it (someone else holds that key) lets the mark run out.
CREATE OR REPLACE FUNCTION outbox.drainer_woke(queue text, mark bigint)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
BEGIN
  IF mark IS NULL OR mark < 0 THEN
    RAISE EXCEPTION 'drainer_woke: mark must be a mark outbox.drainer_waits returned (0 or more), got %',
      COALESCE(mark::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_woke', queue);
  IF mark = 0 OR v_q.notify = 'always' THEN
    RETURN;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL THEN
    RETURN;
  END IF;
  -- The drainers' lock held for this call only, however it ends (see outbox.drainer_waits).
  BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + v_q.queue_id, -5);
    IF pg_catalog.pg_sequence_last_value(v_sequence) = mark THEN
      PERFORM pg_catalog.setval(v_sequence, 1);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'PDL01', MESSAGE = 'pgdrain: the notify locks are let go of';
  EXCEPTION WHEN SQLSTATE 'PDL01' OR lock_not_available THEN
    NULL;
  END;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
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
    v_notified := outbox._commit_keys(v_merged.q, v_merged.keys, v_merged.ids, v_merged.ids, false);
  END LOOP;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of an unpartitioned queue: one NOTIFY per statement
-- (PostgreSQL folds identical notifications of one transaction into one), never one per row. A
-- partitioned queue has none: its rows become claimable at commit, and its commit step
-- (outbox._commit_keys) notifies only when it made or woke a partition head; rows behind an
-- existing head are claimed when the drainer that finishes the head claims again. NOTIFY takes a
-- cluster-wide lock at commit, held through the commit's WAL flush, so concurrent producers that
-- notify commit one at a time: a queue that notifies 'when_waiting' (outbox.set_notify) skips it
-- unless a drainer waits for one (the check of outbox._drainer_waits, inlined: no lookup, its
-- arguments name the queue and sequence).
-- Arguments: channel, queue name (the payload); for 'when_waiting' also the queue_id and the name
-- of its drainer_waits_q<queue_id> sequence (a name, so a restored database finds its own; a
-- trigger made before 00025 gives an oid, which reads the same way).
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- Not in a transaction that set pgdrain.notify to 'off' (two-phase commit: see outbox._drainer_waits).
  IF pg_catalog.current_setting('pgdrain.notify', true) = 'off' THEN
    RETURN NULL;
  END IF;
  -- The gate only tried: one a drainer holds (marking itself, or left held by a cancelled call)
  -- notifies, which is never wrong, and never waits.
  IF TG_NARGS > 2 AND pg_catalog.pg_try_advisory_xact_lock_shared(1885823232 + TG_ARGV[2]::integer, -4) THEN
    IF COALESCE(pg_catalog.pg_sequence_last_value(TG_ARGV[3]::regclass), 0)
       <= (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint THEN
      RETURN NULL;
    END IF;
  END IF;
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The version of the outbox schema installed in this database: the release it belongs to and the
-- number of the last migration applied (the file migrations/outbox/NNNNN_*.sql). A client that needs
-- a function added by migration N checks migration >= N before it starts (the Go drainer does).
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 43;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migrations 00002 and 00003 carry the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__truncate() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__notify() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_runs(text, integer, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked_runs(text, integer, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.queue_info(text) SECURITY DEFINER;
ALTER FUNCTION outbox.poisoned_rows(text, integer, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_waits(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_woke(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_turn(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.poison_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.retry_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.dismiss_poisoned(text, bigint[], text) SECURITY DEFINER;
ALTER FUNCTION outbox.operator_log(text, integer, bigint) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.claim_runs(text, integer, interval, integer),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.claim_locked_runs(text, integer, integer),
  outbox.settle_locked(text, bigint[], text[], text[], timestamptz[])
  TO pgdrain_worker;

-- Operators: read the state, give poisoned rows a fresh start, purge; list the registered queues.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.requeue_poisoned(text, bigint[]),
  outbox.purge_sent(text, interval, integer)
  TO pgdrain_operator;
GRANT SELECT ON outbox.queues TO pgdrain_operator;

-- Workers and operators: a queue's settings, when its next row is due (the drainer's sleep), and the
-- repair pass over its partition heads (the drainer runs it periodically; pgdrain check dry-runs it).
GRANT EXECUTE ON FUNCTION
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.repair(text, boolean)
  TO pgdrain_worker, pgdrain_operator;

-- Workers say when they wait for a NOTIFY of a queue that notifies 'when_waiting' (outbox.set_notify,
-- which like create_queue is granted to nobody), and take turns to claim while rows trickle in.
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint),
  outbox.claim_turn(text, interval)
  TO pgdrain_worker;

-- Workers also read what the Go drainer reports about its queue: the gauges (WithMetrics), wedged
-- partitions (WithWedgeObserver) and the index check at start. All read-only, no payloads.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text)
  TO pgdrain_worker;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.

-- Readers (the operator console's pages, dashboards): the gauges, wedged partitions, the index
-- check, the registered queues and the poisoned rows, never a payload unless granted on the table.
-- Operators read the same, and may end a stuck lease.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.poisoned_rows(text, integer, bigint)
  TO pgdrain_reader;
GRANT SELECT ON outbox.queues TO pgdrain_reader;
GRANT EXECUTE ON FUNCTION
  outbox.poisoned_rows(text, integer, bigint),
  outbox.release_lease(text, bigint)
  TO pgdrain_operator;

-- Operators act on rows that will not move on their own (00025): skip (poison with a reason), retry
-- now, dismiss poisoned rows; every action is fenced and logged, and the log is read by operators
-- and readers.
GRANT EXECUTE ON FUNCTION
  outbox.poison_row(text, bigint, integer, text),
  outbox.retry_row(text, bigint, integer, text),
  outbox.dismiss_poisoned(text, bigint[], text),
  outbox.operator_log(text, integer, bigint)
  TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION outbox.operator_log(text, integer, bigint) TO pgdrain_reader;

-- Everyone who may use the schema reads its version (outbox.version: a constant, no data): the Go
-- drainer checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION outbox.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Whether a REPEATABLE READ or SERIALIZABLE transaction may be writing rows of the queue (it holds
-- the shared lock of outbox.tg_queue__snapshot_producer): a READ COMMITTED commit step then raises
-- its keys' clocks, which such a transaction reads to know it is late. Otherwise it only locks them:
-- a clock written on every commit piles up a version per commit of its key while any session holds
-- back the xmin horizon, and every later commit of the key walks them (issue 29).
-- A try of the exclusive lock, let go at once: another READ COMMITTED commit step trying at the same
-- instant makes it answer true, which only costs a clock write.
-- Why no such transaction can miss a lock-only commit: docs/ordering.md.
CREATE OR REPLACE FUNCTION outbox._snapshot_producers_open(p_queue_id integer)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_class constant integer := outbox._snapshot_lock_class();
BEGIN
  IF pg_catalog.pg_try_advisory_lock(v_class, p_queue_id) THEN
    PERFORM pg_catalog.pg_advisory_unlock(v_class, p_queue_id);
    RETURN false;
  END IF;
  RETURN true;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether a producer of a queue that notifies 'when_waiting' (outbox.set_notify) must NOTIFY: a
-- drainer said it waits for one (outbox.drainer_waits) and has not been woken since. Takes the
-- queue's notify gate shared, held until the transaction ends: a drainer marks itself waiting only
-- while no producer holds it, so a producer that found no drainer waiting commits (its rows
-- visible) before any drainer can start to wait, and that drainer's claim after marking sees them.
-- A shared lock never waits for another producer; it waits for a drainer only while one marks
-- itself, which is one setval inside outbox.drainer_waits (never a drainer's transaction or
-- latency). Queues that notify 'always' answer true without a lock.
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
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_q.queue_id, -4);
  RETURN COALESCE(pg_catalog.pg_sequence_last_value(
                    pg_catalog.to_regclass('outbox.drainer_waits_q' || p_q.queue_id)), 0)
         > (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A drainer of a queue that notifies 'when_waiting' (outbox.set_notify) says it is about to wait up
-- to `wait` for a NOTIFY, so that producers send one. Returns its mark, a number that is 0 when the
-- queue notifies 'always' (nothing to say: wait as usual) and NULL when a producer is between its
-- check and its commit: then look again soon (claim, and call this again), do not wait long. After
-- a mark, claim once more before waiting: rows that committed before the mark sent no NOTIFY. Pass
-- the mark to outbox.drainer_woke when a NOTIFY wakes the drainer.
-- Why nothing is missed: a producer checks for a mark holding the queue's notify gate shared until
-- it commits (outbox._drainer_waits); this takes the gate exclusively without waiting, so it marks
-- only when no producer is between its check and its commit, and each producer either sees the mark
-- (and notifies) or committed before it (and the claim after the mark sees its rows).
-- The gate is held for the call only, whatever transaction it runs in. Drainers exclude each other
-- with a lock of their own (key -5, as outbox.drainer_woke, which clears a mark without the gate):
-- a mark waits up to 100 ms for it, else answers NULL like a held gate.
-- Marks only grow: a later mark replaces an earlier one, even a longer one, so drainer_woke of a
-- drainer never clears another's mark.
CREATE OR REPLACE FUNCTION outbox.drainer_waits(queue text, wait interval)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
  v_mark bigint;
BEGIN
  PERFORM outbox._check_span('drainer_waits', 'wait', wait);
  IF wait IS NULL OR wait <= interval '0' OR wait > interval '1 day' THEN
    RAISE EXCEPTION 'drainer_waits: wait must be positive and at most 1 day, got %', COALESCE(wait::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_waits', queue);
  IF v_q.notify = 'always' THEN
    RETURN 0;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL THEN
    RAISE EXCEPTION 'drainer_waits: queue % has no sequence outbox.drainer_waits_q% (call outbox.set_notify again)',
      v_q.queue, v_q.queue_id USING ERRCODE = '55000';
  END IF;
  -- The gate is taken for this call only (a session lock, released on every way out; a
  -- transaction lock would make producers that must notify wait for the caller's transaction).
  IF NOT pg_catalog.pg_try_advisory_lock(1885823232 + v_q.queue_id, -4) THEN
    RETURN NULL;
  END IF;
  BEGIN
    PERFORM pg_catalog.pg_advisory_lock(1885823232 + v_q.queue_id, -5);
  EXCEPTION WHEN lock_not_available THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RETURN NULL;
  WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RAISE;
  END;
  BEGIN
    v_mark := GREATEST(COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0) + 1,
                       (EXTRACT(epoch FROM pg_catalog.clock_timestamp() + wait) * 1000)::bigint);
    PERFORM pg_catalog.setval(v_sequence, v_mark);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RAISE;
  END;
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
  RETURN v_mark;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A drainer that outbox.drainer_waits marked as waiting was woken by a NOTIFY: producers stop
-- notifying, unless another drainer marked itself since (marks only grow, so its mark is then not
-- this one: every drainer that LISTENs on the channel got the same NOTIFY, so clearing after one is
-- safe only when nobody marked after it). A mark of 0 (a queue that notifies 'always') does nothing.
-- Clearing needs no producer to be out of the way (it is a mark that ran out early, which the
-- protocol already allows: a drainer claims once more after every mark), so it does not take the
-- notify gate: producers that commit back to back hold it shared nearly all the time, and a clear
-- that needed it left every producer notifying, each commit queued on NOTIFY's lock, until the
-- mark ran out (PollFallback + 1 s; issue 29: producers beside one drainer at a quarter of their
-- rate). Drainers exclude each other with a lock of their own (key -5), held for the compare and
-- the setval only; one that waits 100 ms for it (someone else holds that key) lets the mark run out.
CREATE OR REPLACE FUNCTION outbox.drainer_woke(queue text, mark bigint)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
BEGIN
  IF mark IS NULL OR mark < 0 THEN
    RAISE EXCEPTION 'drainer_woke: mark must be a mark outbox.drainer_waits returned (0 or more), got %',
      COALESCE(mark::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_woke', queue);
  IF mark = 0 OR v_q.notify = 'always' THEN
    RETURN;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL THEN
    RETURN;
  END IF;
  BEGIN
    PERFORM pg_catalog.pg_advisory_lock(1885823232 + v_q.queue_id, -5);
  EXCEPTION WHEN lock_not_available THEN
    RETURN;
  END;
  BEGIN
    IF pg_catalog.pg_sequence_last_value(v_sequence) = mark THEN
      PERFORM pg_catalog.setval(v_sequence, 1);
    END IF;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
    RAISE;
  END;
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
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
      -- SERIALIZABLE producer of the queue may be open (outbox._snapshot_producers_open, inline).
      v_write_clock := NOT pg_catalog.pg_try_advisory_lock(outbox._snapshot_lock_class(), v_q.queue_id);
      IF NOT v_write_clock THEN
        v_write_clock := NOT pg_catalog.pg_advisory_unlock(outbox._snapshot_lock_class(), v_q.queue_id);
      END IF;
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
    v_notified := outbox._commit_keys(v_merged.q, v_merged.keys, v_merged.ids, v_merged.ids, false);
  END LOOP;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of an unpartitioned queue: one NOTIFY per statement
-- (PostgreSQL folds identical notifications of one transaction into one), never one per row. A
-- partitioned queue has none: its rows become claimable at commit, and its commit step
-- (outbox._commit_keys) notifies only when it made or woke a partition head; rows behind an
-- existing head are claimed when the drainer that finishes the head claims again. NOTIFY takes a
-- cluster-wide lock at commit, held through the commit's WAL flush, so concurrent producers that
-- notify commit one at a time: a queue that notifies 'when_waiting' (outbox.set_notify) skips it
-- unless a drainer waits for one (the check of outbox._drainer_waits, inlined: no lookup, its
-- arguments name the queue and sequence).
-- Arguments: channel, queue name (the payload); for 'when_waiting' also the queue_id and the name
-- of its drainer_waits_q<queue_id> sequence (a name, so a restored database finds its own; a
-- trigger made before 00025 gives an oid, which reads the same way).
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- Not in a transaction that set pgdrain.notify to 'off' (two-phase commit: see outbox._drainer_waits).
  IF pg_catalog.current_setting('pgdrain.notify', true) = 'off' THEN
    RETURN NULL;
  END IF;
  IF TG_NARGS > 2 THEN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + TG_ARGV[2]::integer, -4);
    IF COALESCE(pg_catalog.pg_sequence_last_value(TG_ARGV[3]::regclass), 0)
       <= (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint THEN
      RETURN NULL;
    END IF;
  END IF;
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The version of the outbox schema installed in this database: the release it belongs to and the
-- number of the last migration applied (the file migrations/outbox/NNNNN_*.sql). A client that needs
-- a function added by migration N checks migration >= N before it starts (the Go drainer does).
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 42;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
SELECT outbox._forget_kept_statements();
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migrations 00002 and 00003 carry the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__truncate() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__notify() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_runs(text, integer, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked_runs(text, integer, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.queue_info(text) SECURITY DEFINER;
ALTER FUNCTION outbox.poisoned_rows(text, integer, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_waits(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_woke(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_turn(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.poison_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.retry_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.dismiss_poisoned(text, bigint[], text) SECURITY DEFINER;
ALTER FUNCTION outbox.operator_log(text, integer, bigint) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.claim_runs(text, integer, interval, integer),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.claim_locked_runs(text, integer, integer),
  outbox.settle_locked(text, bigint[], text[], text[], timestamptz[])
  TO pgdrain_worker;

-- Operators: read the state, give poisoned rows a fresh start, purge; list the registered queues.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.requeue_poisoned(text, bigint[]),
  outbox.purge_sent(text, interval, integer)
  TO pgdrain_operator;
GRANT SELECT ON outbox.queues TO pgdrain_operator;

-- Workers and operators: a queue's settings, when its next row is due (the drainer's sleep), and the
-- repair pass over its partition heads (the drainer runs it periodically; pgdrain check dry-runs it).
GRANT EXECUTE ON FUNCTION
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.repair(text, boolean)
  TO pgdrain_worker, pgdrain_operator;

-- Workers say when they wait for a NOTIFY of a queue that notifies 'when_waiting' (outbox.set_notify,
-- which like create_queue is granted to nobody), and take turns to claim while rows trickle in.
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint),
  outbox.claim_turn(text, interval)
  TO pgdrain_worker;

-- Workers also read what the Go drainer reports about its queue: the gauges (WithMetrics), wedged
-- partitions (WithWedgeObserver) and the index check at start. All read-only, no payloads.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text)
  TO pgdrain_worker;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.

-- Readers (the operator console's pages, dashboards): the gauges, wedged partitions, the index
-- check, the registered queues and the poisoned rows, never a payload unless granted on the table.
-- Operators read the same, and may end a stuck lease.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.poisoned_rows(text, integer, bigint)
  TO pgdrain_reader;
GRANT SELECT ON outbox.queues TO pgdrain_reader;
GRANT EXECUTE ON FUNCTION
  outbox.poisoned_rows(text, integer, bigint),
  outbox.release_lease(text, bigint)
  TO pgdrain_operator;

-- Operators act on rows that will not move on their own (00025): skip (poison with a reason), retry
-- now, dismiss poisoned rows; every action is fenced and logged, and the log is read by operators
-- and readers.
GRANT EXECUTE ON FUNCTION
  outbox.poison_row(text, bigint, integer, text),
  outbox.retry_row(text, bigint, integer, text),
  outbox.dismiss_poisoned(text, bigint[], text),
  outbox.operator_log(text, integer, bigint)
  TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION outbox.operator_log(text, integer, bigint) TO pgdrain_reader;

-- Everyone who may use the schema reads its version (outbox.version: a constant, no data): the Go
-- drainer checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION outbox.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd
