-- +goose Up
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
-- +goose StatementEnd

-- +goose StatementBegin
-- The claim behind claim_batch (mode 'lease', partitioned queues; claim_batch leases unpartitioned
-- rows in one statement of its own) and claim_locked (mode 'lock'). Returns the ids of the claimed
-- rows; the caller reads them back. Deliverable = unsent, not poisoned, due, lease free or expired,
-- and on a partitioned queue the first deliverable row of its partition.
--
-- Partitioned queues claim through outbox.partition_heads (one row per partition with pending
-- work), never through the pending rows themselves, so blocked successors, heads in backoff and
-- poisoned rows cost nothing: a head backing off is "parked" until its time and woken (at most a
-- bounded number per call) when that time has come; a head whose row is leased stays ready and is
-- passed over with one probe. Heads are locked FOR NO KEY UPDATE SKIP LOCKED, which concurrent
-- claimers skip and producers (who hold only advisory locks) do not wait for. Each candidate is
-- still checked against the FIFO rule on the queue table, from the partition's floor (below it
-- every row is sent or poisoned), so poisoned rows in front of a head are not walked again.
--
-- p_run > 1 (claim_batch's and claim_locked's run_length): with each head claimed, the rows that
-- follow it in its partition (outbox._claim_run), up to p_run per partition and p_batch_size in
-- all, so that a partition's run costs one head search and, recorded together, one head write.
CREATE OR REPLACE FUNCTION outbox._claim(p_q outbox.queues, p_batch_size integer, p_lease interval, p_mode text,
                                         p_run integer)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table regclass := p_q.table_oid::regclass;
  -- Due and lease times against the clock, not now(): a claim in a transaction that began long ago
  -- must neither miss what has become due since nor hand out a lease that has already run out.
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_due constant text := 't.sent_at IS NULL AND t.attempt_count < $2
    AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= $now)
    AND (t.leased_until IS NULL OR t.leased_until <= $now)';
  v_all bigint[] := '{}';
  v_ids bigint[];
  v_keys text[];
  v_heads bigint[];
  v_floors bigint[];
  v_claimed_keys text[];
  v_stale text[];
  v_remaining integer := p_batch_size;
  v_until timestamptz;
  v_leased_until timestamptz;
  -- Where this session's last claim of this queue stopped among fresh heads (attempt_count 0), in
  -- head_id order, and when that run of claims started from the front (epoch seconds). Heads a claim
  -- or result moved on leave dead index entries in front of the live ones until vacuum removes them,
  -- which it can not while another session holds the xmin horizon: starting past them keeps a claim
  -- from walking the whole drain's history. A per-session hint only: a claim that finds fewer heads
  -- past it than it wants goes on from the front, and a cursor older than a second is not used.
  -- Heads behind every cursor (a lease that ran out, a row given back, a claim rolled back) are
  -- reached by the one claim per second per queue that searches from the front (the queue's shared
  -- hints, below); a session without a cursor starts where that search stopped. Retried heads
  -- (attempt_count > 0) are always searched from the front, after the fresh ones.
  v_cursor constant text := 'pgdrain.claim_cursor_' || p_q.queue_id;
  v_cursor_value constant text[] := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_cursor, true), ''), ',');
  v_run_started double precision := CASE
    WHEN v_cursor_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_cursor_value[2]::double precision END;
  v_from_head bigint := CASE WHEN v_run_started IS NOT NULL THEN v_cursor_value[1]::bigint END;
  v_last_fresh bigint;
  v_front_duty boolean := false;
  v_only_fresh boolean;
  -- The queue's shared hints (outbox._install_claim_hints); NULL when the queue has none.
  v_start constant regclass := pg_catalog.to_regclass('outbox.claim_start_q' || p_q.queue_id);
  v_front_hint constant regclass := pg_catalog.to_regclass('outbox.claim_front_q' || p_q.queue_id);
  v_now_ms constant bigint := (pg_catalog.date_part('epoch', v_now) * 1000)::bigint;
  v_front_ms bigint;
  v_seen text[] := '{}';
  -- A head whose row is in flight (leased, the lease running) is passed over without a lock: a
  -- claim that locked it would hold it until its commit (its WAL flush), and the result that moves
  -- the head on would wait for that.
  v_not_in_flight constant text := pg_catalog.format(
    'NOT EXISTS (SELECT 1 FROM %s t WHERE t.id = h.head_id AND t.leased_until > $5)', v_table);
  -- Where a search stopped is the largest head id it saw, as its snapshot saw it. A head that a
  -- result moved on after the search's snapshot was taken comes back locked in its new version
  -- (READ COMMITTED re-reads a row it locks), with the id of its key's next row, as far ahead as
  -- that row is: taken as the stop, it sent every replica's next claim past the queue's last head
  -- and on to the front (about half the claims of 4 replicas searched the front again). A version
  -- the statement's snapshot does not see is such a head, and is left out of the stop (our own
  -- transaction's writes are seen, though its xid may be past the snapshot's xmax).
  v_seen_by_search constant text :=
    '(s.written_by = (SELECT pg_catalog.xid(pg_catalog.pg_current_xact_id_if_assigned()))
      OR pg_catalog.age(s.written_by) > (SELECT pg_catalog.age(pg_catalog.xid(pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()))))
         AND s.written_by <> ALL (ARRAY(SELECT pg_catalog.xid(pg_catalog.pg_snapshot_xip(pg_catalog.pg_current_snapshot())))))';
  v_busy text[];
  v_front boolean;
  v_asked integer;
  v_run_ids bigint[];
  -- Rows a claimed head brings with it (itself included): how many heads to ask for. Starts from
  -- what this session's claims of the queue learnt (a per-session hint, like the cursor): starting
  -- every claim from p_run asked for too few heads whenever runs are shorter, and every claim then
  -- searched, leased and extended runs twice. A pass with budget left over measures the rows per
  -- head; one that the batch cut short only says they are at least that many, and keeps the larger
  -- estimate. An estimate older than a second is not used, so longer runs are found again (that
  -- claim may take two passes).
  v_run_hint constant text := 'pgdrain.run_rows_' || p_q.queue_id;
  v_run_hint_value constant text[] := CASE WHEN p_run > 1 THEN pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_run_hint, true), ''), ',') END;
  v_run_hint_since double precision := CASE
    WHEN v_run_hint_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_run_hint_value[2]::double precision END;
  v_rows_per_head numeric := CASE WHEN p_run <= 1 THEN 1
    WHEN v_run_hint_since IS NULL THEN p_run
    ELSE LEAST(p_run, GREATEST(1, v_run_hint_value[1]::numeric)) END;
  v_seen_per_head numeric;
  -- Lock mode: rows this transaction already holds from an earlier claim_locked. SKIP LOCKED does
  -- not skip our own locks, so without excluding them before the LIMIT they would take the places
  -- of rows that can still be claimed.
  v_held bigint[] := CASE WHEN p_mode = 'lock' THEN COALESCE(pg_catalog.string_to_array(NULLIF(
    pg_catalog.current_setting('pgdrain.held_' || p_q.queue_id, true), ''), ',')::bigint[], '{}') ELSE '{}' END;
BEGIN
  IF p_q.partition_column IS NULL THEN  -- lock mode only (see above)
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s AND t.id <> ALL ($4)
         ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, pg_catalog.replace(v_due, '$now', '$3')),
      'integer, integer, timestamptz, bigint[]', 'TABLE(pgdrain_ids bigint[])')
      INTO v_all USING p_batch_size, p_q.max_attempts, v_now, v_held;
    RETURN COALESCE(v_all, '{}');
  END IF;

  -- Heads not built (after a crash): each claim that gets the rebuild lock rebuilds one part of them
  -- (outbox._restore_heads, about 50 ms of keys). Another claim's transaction rebuilding a part now
  -- holds the rebuild lock until it ends, a whole lock-mode batch: not waited for. This claim takes
  -- what the heads there are offer (each is checked against the FIFO rule from its floor, so a
  -- partial set is only incomplete), and the rebuilder's commit wakes the drainers.
  -- (Two IFs: the lock is tried only when the heads are not built, never by the usual claim.)
  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    IF pg_catalog.pg_try_advisory_xact_lock(1885823232 + p_q.queue_id, -1) THEN
      PERFORM outbox._restore_heads(p_q);
    END IF;
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now. Its first statement (a SERIALIZABLE transaction: every one)
  -- noted them in its hook (outbox._note_written).
  -- (A transaction that has written nothing has no xid, and looks no further.)
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL
     AND (EXISTS (SELECT 1 FROM outbox.commit_notes n
                  WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = p_q.table_oid)
          OR EXISTS (SELECT 1 FROM outbox.commit_hooks h
                     WHERE h.xid = pg_catalog.pg_current_xact_id() AND p_q.table_oid = ANY (h.table_oids))) THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY(
      SELECT DISTINCT u.k FROM outbox.commit_notes n CROSS JOIN LATERAL pg_catalog.unnest(n.keys) AS u(k)
      WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = p_q.table_oid
      UNION
      SELECT u.k FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids, h.keys) AS u(table_oid, k)
      WHERE h.xid = pg_catalog.pg_current_xact_id() AND u.table_oid = p_q.table_oid));
  END IF;

  -- What producers could not write to heads a claim held while they committed.
  IF EXISTS (SELECT 1 FROM outbox.partition_wakes w WHERE w.queue_id = p_q.queue_id) THEN
    PERFORM outbox._apply_wakes(p_q);
  END IF;

  -- Wake parked heads whose lease or backoff has ended, oldest first, a bounded number per call.
  -- By ctid: a TID scan touches exactly these heads whatever the statistics say.
  UPDATE outbox.partition_heads h SET parked_until = NULL
  WHERE h.ctid = ANY (ARRAY(
    SELECT w.ctid FROM outbox.partition_heads w
    WHERE w.queue_id = p_q.queue_id AND w.parked_until <= v_now
    ORDER BY w.parked_until
    LIMIT GREATEST(4 * p_batch_size, 64)
    FOR NO KEY UPDATE SKIP LOCKED));

  -- No cursor of this session's own (a new session, or its run started over a second ago): only one
  -- claim per second per queue searches from the front, the one that finds the last search a second
  -- old, and leaves where it stopped as the queue's start; the others start there, past the dead
  -- entries the drain left in front (which a held xmin keeps), and their run is as old as that search.
  IF v_from_head IS NULL AND v_front_hint IS NOT NULL AND v_start IS NOT NULL THEN
    v_front_ms := pg_catalog.pg_sequence_last_value(v_front_hint);
    IF v_front_ms > v_now_ms - 1000 AND v_front_ms <= v_now_ms THEN
      v_from_head := pg_catalog.pg_sequence_last_value(v_start);
      v_run_started := v_front_ms / 1000.0;
    ELSE
      PERFORM pg_catalog.setval(v_front_hint, v_now_ms);
      v_front_duty := true;
    END IF;
  END IF;

  -- Lease mode: a cursor of this session's own goes on from where any claim of the queue last
  -- stopped among fresh heads, if that is further. The heads between were leased by other sessions
  -- (replicas): walking them cost each of four replicas the other three's claims (sampled claims in
  -- a 4-replica drain read 3-4x the buffers of a claim at rest; 1x with this). Not in lock mode,
  -- where it measured slower: a head another batch holds is skipped by its lock, and jumping past
  -- heads that batch then hands back sends more claims to the front.
  IF p_mode = 'lease' AND v_from_head IS NOT NULL AND v_start IS NOT NULL THEN
    v_from_head := GREATEST(v_from_head, pg_catalog.pg_sequence_last_value(v_start));
  END IF;

  FOR pass IN 1..4 LOOP
    v_front := v_from_head IS NULL;
    v_asked := pg_catalog.ceil(v_remaining / v_rows_per_head)::integer;
    IF NOT v_front THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE %s)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.xmin AS written_by FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 AND h.attempt_count = 0 AND h.head_id > $2
                 AND h.head_id <> ALL ($3) AND h.partition_key <> ALL ($4)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $6
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, v_not_in_flight),
        'integer, bigint, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint)')
        INTO v_keys, v_heads, v_floors, v_last_fresh
        USING p_q.queue_id, v_from_head, v_all || v_held, v_seen, v_now, v_asked;
      -- Too few past the cursor: the next pass goes on from the front; otherwise past these heads
      -- (a head in flight is not walked again by every pass).
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_asked THEN
        v_from_head := NULL;
      ELSE
        v_from_head := COALESCE(v_last_fresh, v_from_head);
      END IF;
    ELSE
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0 AND %s),
                pg_catalog.bool_and(s.attempt_count = 0)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count, h.xmin AS written_by
               FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
                 -- locks: without this a later pass would take them again.
                 AND (h.head_id IS NULL OR h.head_id <> ALL ($2))
                 AND h.partition_key <> ALL ($3)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $5
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, pg_catalog.replace(v_not_in_flight, '$5', '$4')),
        'integer, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint, pgdrain_only_fresh boolean)')
        INTO v_keys, v_heads, v_floors, v_last_fresh, v_only_fresh
        USING p_q.queue_id, v_all || v_held, v_seen, v_now, v_asked;
      v_run_started := pg_catalog.date_part('epoch', v_now);
      -- As many fresh heads as asked for: the next pass goes on past them as from a cursor.
      IF v_only_fresh AND pg_catalog.cardinality(v_keys) = v_asked THEN
        v_from_head := v_last_fresh;
      END IF;
    END IF;
    IF v_keys IS NULL THEN
      EXIT WHEN v_front;
      CONTINUE;
    END IF;
    IF v_last_fresh IS NOT NULL THEN
      -- As numeric: a double's text follows the caller's extra_float_digits (at -15 the time read
      -- 2e+09, a cursor that never aged, and heads behind it waited for another session's claim).
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started::numeric, false);
      -- Every search past the start moves it on, in both modes: a session without a cursor of its
      -- own then starts past the heads just taken. Lock mode left it to the search from the front,
      -- and such a claim walked every head moved in up to a second (3-6x a claim at rest in
      -- 4-replica drains).
      IF v_front_duty AND v_front THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      ELSIF NOT v_front AND v_start IS NOT NULL
            AND v_last_fresh > COALESCE(pg_catalog.pg_sequence_last_value(v_start), 0) THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      END IF;
    END IF;

    -- Lease mode leases what it locks in the same statement (one statement planned, not two),
    -- from the clock once the statement runs (an init plan, read at the first row leased; $7, the
    -- lease), one end for all its rows: a statement that waited for a lock on
    -- the table (DDL, a migration) handed out leases counted from before the wait, over already
    -- when it returned, and another claimer took the rows while the first delivered them.
    v_until := pg_catalog.clock_timestamp() + p_lease;
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH picked AS (
         SELECT t.id, t.%2$I AS key, t.ctid AS version, t.tableoid AS version_table
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS c(id, floor_id, key)
         -- A head must point at a row of its own partition (heads of new keys come from settings a
         -- producer could forge); one that does not is stale and refreshed below.
         JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%4$s
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           -- A floor at the head itself (a head a result moved on, the usual one) leaves no row
           -- below it to look for: no probe.
           AND (c.floor_id >= t.id
                OR NOT EXISTS (SELECT 1 FROM %1$s p
                               WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                                 AND p.sent_at IS NULL AND p.attempt_count < $2
                               OFFSET 0))
         FOR UPDATE OF t SKIP LOCKED),
       claimed AS (%5$s)
       SELECT pg_catalog.array_agg(claimed.id), pg_catalog.array_agg(claimed.key::text),
              pg_catalog.max(claimed.until) FROM claimed',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type,
      CASE WHEN p_mode = 'lease'
           THEN pg_catalog.format(
             -- By the version picked locked (a TID scan), not by id: a second index probe per row.
             -- A version newer than the statement's snapshot (a concurrent release committed
             -- between the snapshot and the lock) is not leased; its head counts as stale below.
             -- With its table: a ctid names a row only within one table, and a queue table
             -- partitioned by range has one per partition (each with its own (0,1)).
             'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(),
                leased_until = GREATEST($6, (SELECT pg_catalog.clock_timestamp() + $7))
              FROM picked WHERE u.ctid = picked.version AND u.tableoid = picked.version_table
              RETURNING u.id, picked.key, u.leased_until AS until', v_table)
           ELSE 'SELECT picked.id, picked.key, NULL::timestamptz AS until FROM picked' END),
      'bigint[], integer, bigint[], text[], timestamptz, timestamptz, interval',
      'TABLE(pgdrain_ids bigint[], pgdrain_keys text[], pgdrain_until timestamptz)')
      INTO v_ids, v_claimed_keys, v_leased_until USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now, v_until, p_lease;
    -- A run's rows end their leases with its head's.
    v_until := COALESCE(v_leased_until, v_until);

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_run > 1 AND v_remaining > 0 THEN
        v_run_ids := outbox._claim_run(p_q, v_ids, v_claimed_keys, p_run - 1, v_remaining, v_now, v_until, p_mode);
        v_all := v_all || v_run_ids;
        v_remaining := v_remaining - pg_catalog.cardinality(v_run_ids);
        v_seen_per_head := (pg_catalog.cardinality(v_ids) + pg_catalog.cardinality(v_run_ids))::numeric
                           / pg_catalog.cardinality(v_ids);
        v_rows_per_head := LEAST(p_run, GREATEST(1, CASE WHEN v_remaining > 0 THEN v_seen_per_head
                                                         ELSE GREATEST(v_seen_per_head, v_rows_per_head) END));
        v_run_hint_since := COALESCE(v_run_hint_since, pg_catalog.date_part('epoch', v_now));
        PERFORM pg_catalog.set_config(v_run_hint,
          pg_catalog.round(v_rows_per_head, 2) || ',' || v_run_hint_since::numeric, false);
      END IF;
    END IF;

    -- Heads not claimed are in flight (their row is leased right now: nothing to refresh, their
    -- result moves them on, and an expired lease makes the row claimable again through the same
    -- head; this call looks at them no more) or stale: pointing at a row that is no longer (or not
    -- yet) the partition's deliverable head, refreshed here.
    -- NOT IN a subquery: a hashed subplan, linear in the keys (<> ALL compared every key with every
    -- claimed one: 0.7 ms per claim of 256 rows, 10 ms of 1,000).
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k NOT IN (SELECT c FROM pg_catalog.unnest(v_claimed_keys) AS c);
    v_busy := NULL;
    IF v_stale IS NOT NULL THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NULL),
                pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NOT NULL)
         FROM unnest($1::bigint[], $2::text[]) AS c(id, key)
         LEFT JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%3$s AND t.sent_at IS NULL
           AND t.attempt_count < $4 AND t.leased_until > $5
           AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= t.leased_until)
         WHERE c.key = ANY ($3)',
        v_table, p_q.partition_column, p_q.partition_type),
        'bigint[], text[], text[], integer, timestamptz', 'TABLE(pgdrain_stale text[], pgdrain_busy text[])')
        INTO v_stale, v_busy USING v_heads, v_keys, v_stale, p_q.max_attempts, v_now;
      v_seen := v_seen || COALESCE(v_busy, '{}');
    END IF;
    IF v_stale IS NOT NULL THEN
      PERFORM outbox._refresh_heads(p_q, v_stale);
    END IF;
    EXIT WHEN v_remaining <= 0;
    -- From the front, fewer heads than asked for and nothing refreshed: there is nothing more.
    EXIT WHEN v_front AND v_stale IS NULL AND pg_catalog.cardinality(v_keys) < v_asked;
  END LOOP;
  RETURN v_all;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose StatementBegin
-- Applies the wake notes producers left for a queue (outbox.partition_wakes, see
-- outbox.tg_queue__commit): a committed row of the note's key whose head a claim held at the
-- time. Each noted partition gets what the producer could not write itself: a head if it has
-- none, an empty head pointed at the row and woken, a floor lowered to the row. Notes of a head
-- that is still held stay for a later claim; a bounded number per call, oldest first.
-- Returns the keys it applied, for the caller to refresh.
-- Never waits for another claim: a head that another open transaction is making (a lock-mode batch
-- that applied a note of the key keeps its new head uncommitted for the whole batch) would hold
-- this insert on its index entry until that batch ends, and every claim of the queue behind it,
-- and two batches each making a head the other wants deadlocked. The insert gives up after 1 ms
-- instead, in a block of its own (entered only when notes make heads), then key by key, and the
-- notes of a head it could not make stay for a later claim.
-- The 1 ms bound is for those row and index-entry waits only, set inside the blocks that catch
-- it: the tables' own locks are taken first, with the caller's lock_timeout. Another session
-- holding or waiting for a lock on the heads table (TRUNCATE, VACUUM FULL, autovacuum truncating
-- its end, LOCK TABLE) is waited for, as by every claim; with the whole function at 1 ms, the
-- statements between the blocks failed the claim with 55P03 instead (a hostile run that truncated
-- the unlogged tables: about 2,000 failed claims).
CREATE OR REPLACE FUNCTION outbox._apply_wakes(p_q outbox.queues)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_notes tid[];
  v_keys text[];
  v_lows bigint[];
  v_fixed text[];
  v_made text[];
  v_timeout constant text := pg_catalog.current_setting('lock_timeout');
BEGIN
  SELECT pg_catalog.array_agg(w.ctid) INTO v_notes
  FROM (SELECT x.ctid FROM outbox.partition_wakes x WHERE x.queue_id = p_q.queue_id
        LIMIT 256 FOR UPDATE SKIP LOCKED) w;
  IF v_notes IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT pg_catalog.array_agg(s.k ORDER BY s.k), pg_catalog.array_agg(s.lo ORDER BY s.k)
    INTO v_keys, v_lows
  FROM (SELECT w.partition_key AS k, pg_catalog.min(w.low_id) AS lo FROM outbox.partition_wakes w
        WHERE w.ctid = ANY (v_notes) GROUP BY 1) s;
  LOCK TABLE outbox.partition_heads IN ROW EXCLUSIVE MODE;

  -- Heads we can lock now (or that do not exist: made here) take the note; the others wait.
  -- SKIP LOCKED does not keep the lock from waiting on a head that a transaction that committed
  -- after this statement's snapshot moved and another holds now ("while locking updated version of
  -- tuple"): the lock_timeout ends that wait, and these notes then wait for a later claim (the error
  -- escaped the claim, which failed with 55P03). A block entered only by claims with notes.
  BEGIN
  PERFORM pg_catalog.set_config('lock_timeout', '1ms', true);
  WITH held AS (
    SELECT h.partition_key FROM outbox.partition_heads h
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
    FOR NO KEY UPDATE SKIP LOCKED),
  fixed AS (
    UPDATE outbox.partition_heads h
    SET head_id = COALESCE(h.head_id, u.lo),
        parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
        floor_id = LEAST(h.floor_id, u.lo)
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k AND u.k IN (SELECT held.partition_key FROM held)
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(fixed.partition_key) INTO v_fixed FROM fixed;
  PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
  EXCEPTION WHEN lock_not_available THEN  -- (a block's settings end with it)
    v_fixed := NULL;
  END;

  IF EXISTS (SELECT 1 FROM unnest(v_keys) AS u(k)
             WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                               WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)) THEN
    BEGIN
      PERFORM pg_catalog.set_config('lock_timeout', '1ms', true);
      WITH made AS (
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        -- Floor 0: notes of the key beyond this call's may hold smaller ids.
        SELECT p_q.queue_id, u.k, u.lo, 0
        FROM unnest(v_keys, v_lows) AS u(k, lo)
        WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                          WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
        ORDER BY u.k
        ON CONFLICT (queue_id, partition_key) DO NOTHING
        RETURNING h.partition_key)
      SELECT pg_catalog.array_agg(made.partition_key) INTO v_made FROM made;
      PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
    EXCEPTION WHEN lock_not_available THEN
      -- One key by one, so that the head another transaction is making holds back only its key.
      v_made := NULL;
      FOR i IN 1..pg_catalog.cardinality(v_keys) LOOP
        BEGIN
          PERFORM pg_catalog.set_config('lock_timeout', '1ms', true);
          INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
          SELECT p_q.queue_id, v_keys[i], v_lows[i], 0
          WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                            WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_keys[i])
          ON CONFLICT (queue_id, partition_key) DO NOTHING;
          IF FOUND THEN
            v_made := v_made || v_keys[i];
          END IF;
          PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
        EXCEPTION WHEN lock_not_available THEN
          NULL;
        END;
      END LOOP;
    END;
  END IF;

  v_fixed := v_fixed || v_made;
  DELETE FROM outbox.partition_wakes w
  WHERE w.ctid = ANY (v_notes) AND w.partition_key = ANY (v_fixed);
  RETURN v_fixed;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Finds the pending deliverable rows of a partitioned queue that no claim can reach, and (unless
-- dry_run) makes them reachable again. Partition heads, floors and parks are a cache of the queue
-- table (outbox.partition_heads); this checks the cache against the table, one key at a time:
--   missing_head     the key has a deliverable row but no head: no claim would ever look at it;
--   floor_above_row  the head's floor (below it, everything is taken to be sent or poisoned) is above
--                    the key's first deliverable row: that row would never be found;
--   parked_past_due  the head is parked (lease or backoff) more than a second past the time its first
--                    deliverable row is due;
--   stale_notes      (no key) a transaction that wrote the queue ended without its commit step
--                    (pgdrain_commit disabled): its notes in outbox.commit_notes (or, SERIALIZABLE,
--                    in its row of outbox.commit_hooks) are deleted.
-- Every fix moves the cache the safe way (a head is made or pointed at the first deliverable row, a
-- floor lowered, a park ended): a claim re-checks every head against the table, so a fix that
-- raced another session is harmless. Heads locked by a claim right now are skipped (their claim
-- refreshes them). Cost: one walk over the distinct keys with unsent rows (a skip scan of the
-- partition index) plus, per key, its poisoned rows in front of its first deliverable one: it grows
-- with partitions, not with rows. One repair per queue at a time (advisory lock (1885823232 +
-- queue_id, -3), tried, never waited for: a second caller returns nothing).
-- Every problem is returned (and, when fixed, raised as a WARNING for the server log and counted in
-- outbox.repairs); an empty result means the cache was right. Unpartitioned queues keep no cache.
CREATE OR REPLACE FUNCTION outbox.repair(queue text, dry_run boolean DEFAULT false)
RETURNS TABLE(partition_key text, cause text, head_id bigint, detail text)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_material = off
SET jit = off
AS $$
DECLARE
  fn constant text := 'repair';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_noted text[] := '{}';
  r record;
BEGIN
  IF dry_run IS NULL THEN
    PERFORM outbox._invalid(fn, 'dry_run must not be NULL');
  END IF;
  IF v_q.partition_column IS NULL
     OR NOT pg_catalog.pg_try_advisory_xact_lock(1885823232 + v_q.queue_id, -3)
     -- Not built yet (after a crash): claims are rebuilding them, a part each (outbox._restore_heads).
     OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id) THEN
    RETURN;
  END IF;

  -- Keys this very transaction wrote whose commit step has not run yet (a requeue_poisoned or a
  -- producer before the repair, in one transaction): that step makes or moves their heads, as a
  -- claim in the same transaction does first (outbox._claim). Not problems.
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
    SELECT COALESCE(pg_catalog.array_agg(u.k), '{}') INTO v_noted
    FROM (SELECT x.k FROM outbox.commit_notes n CROSS JOIN LATERAL pg_catalog.unnest(n.keys) AS x(k)
          WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = v_q.table_oid
          UNION
          SELECT x.k FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids, h.keys) AS x(table_oid, k)
          WHERE h.xid = pg_catalog.pg_current_xact_id() AND x.table_oid = v_q.table_oid) u;
  END IF;

  -- Every per-key lookup is a LATERAL probe of an index (OFFSET 0 keeps it one: the planner must not
  -- turn it into a join). The CTE's row estimate is tiny whatever the queue holds, and given a join
  -- the planner materialized every head of the queue and compared each key with each of them:
  -- 16,666 keys took 20 s, keys squared.
  FOR r IN EXECUTE pg_catalog.format(
    'WITH RECURSIVE keys(k) AS (
       (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL ORDER BY t.%2$I LIMIT 1)
       UNION ALL
       SELECT (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL AND t.%2$I > keys.k ORDER BY t.%2$I LIMIT 1)
       FROM keys WHERE keys.k IS NOT NULL)
     SELECT s.key, s.cause, s.head_id, s.row_id, s.detail FROM (
       SELECT keys.k::text AS key, h.head_id, f.id AS row_id,
              CASE WHEN h.present IS NULL THEN ''missing_head''
                   WHEN h.floor_id > f.id THEN ''floor_above_row''
                   WHEN h.parked_until > f.due + interval ''1 second'' THEN ''parked_past_due'' END AS cause,
              CASE WHEN h.present IS NULL THEN pg_catalog.format(''row %%s has no partition head'', f.id)
                   WHEN h.floor_id > f.id THEN pg_catalog.format(''floor %%s is above row %%s'', h.floor_id, f.id)
                   ELSE pg_catalog.format(''head parked until %%s, row %%s due at %%s'', h.parked_until, f.id, f.due)
              END AS detail
       FROM keys
       CROSS JOIN LATERAL (
         SELECT t.id, GREATEST(t.next_attempt_at, t.leased_until, $3) AS due FROM %1$s t
         WHERE t.%2$I = keys.k AND t.sent_at IS NULL AND t.attempt_count < $2
         ORDER BY t.id LIMIT 1) f
       LEFT JOIN LATERAL (
         SELECT true AS present, x.head_id, x.floor_id, x.parked_until FROM outbox.partition_heads x
         WHERE x.queue_id = $1 AND x.partition_key = keys.k::text
         OFFSET 0) h ON true
       -- A key with a wake note is not stuck: the next claim applies the note (outbox._apply_wakes).
       CROSS JOIN LATERAL (
         SELECT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                        WHERE w.queue_id = $1 AND w.partition_key = keys.k::text) AS noted
         OFFSET 0) n
       WHERE keys.k IS NOT NULL AND NOT n.noted AND keys.k::text <> ALL ($4)) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_now, v_noted
  LOOP
    IF NOT dry_run THEN
      IF r.cause = 'missing_head' THEN
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        VALUES (v_q.queue_id, r.key, r.row_id, r.row_id)
        ON CONFLICT ON CONSTRAINT partition_heads_pkey DO NOTHING;
      ELSE
        UPDATE outbox.partition_heads h
        SET head_id = r.row_id, parked_until = NULL, floor_id = LEAST(h.floor_id, r.row_id)
        WHERE h.ctid = (SELECT x.ctid FROM outbox.partition_heads x
                        WHERE x.queue_id = v_q.queue_id AND x.partition_key = r.key
                        FOR NO KEY UPDATE SKIP LOCKED);
      END IF;
      CONTINUE WHEN NOT FOUND;
      RAISE WARNING 'pgdrain repair: queue %, partition %: % (%)', v_q.queue, r.key, r.cause, r.detail;
      INSERT INTO outbox.repairs AS c (queue, cause, repairs, last_repair_at)
      VALUES (v_q.queue, r.cause, 1, v_now)
      ON CONFLICT ON CONSTRAINT repairs_pkey DO UPDATE SET repairs = c.repairs + 1, last_repair_at = EXCLUDED.last_repair_at;
    END IF;
    partition_key := r.key;
    cause := r.cause;
    head_id := r.head_id;
    detail := r.detail;
    RETURN NEXT;
  END LOOP;
  IF NOT dry_run AND FOUND THEN
    PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  END IF;

  -- Notes of transactions that ended without running their commit step (pgdrain_commit was
  -- disabled): never read again, they would stay forever. The rows they noted were checked above
  -- like any other; the notes are only garbage.
  FOR r IN
    SELECT s.xid, pg_catalog.sum(s.notes) AS notes
    FROM (SELECT n.xid, pg_catalog.count(*) AS notes
          FROM outbox.commit_notes n
          WHERE n.table_oid = v_q.table_oid
            AND pg_catalog.pg_xact_status(n.xid) IS DISTINCT FROM 'in progress'
          GROUP BY n.xid
          UNION ALL
          -- The first statement's notes (a SERIALIZABLE transaction's: all) are in its hook, one entry
          -- per row (outbox._note_written).
          SELECT h.xid, pg_catalog.count(*)
          FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids) AS o(table_oid)
          WHERE o.table_oid = v_q.table_oid
            AND pg_catalog.pg_xact_status(h.xid) IS DISTINCT FROM 'in progress'
          GROUP BY h.xid) s
    GROUP BY s.xid
    ORDER BY s.xid
  LOOP
    detail := pg_catalog.format('%s notes of transaction %s, which ended without its commit step', r.notes, r.xid);
    IF NOT dry_run THEN
      DELETE FROM outbox.commit_notes n WHERE n.xid = r.xid AND n.table_oid = v_q.table_oid;
      DELETE FROM outbox.commit_hooks h WHERE h.xid = r.xid;
      RAISE WARNING 'pgdrain repair: queue %: stale_notes (%)', v_q.queue, detail;
      INSERT INTO outbox.repairs AS c (queue, cause, repairs, last_repair_at)
      VALUES (v_q.queue, 'stale_notes', 1, v_now)
      ON CONFLICT ON CONSTRAINT repairs_pkey DO UPDATE SET repairs = c.repairs + 1, last_repair_at = EXCLUDED.last_repair_at;
    END IF;
    partition_key := NULL;
    cause := 'stale_notes';
    head_id := NULL;
    RETURN NEXT;
  END LOOP;
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
  SELECT '0.1.0'::text, 49;
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
ALTER FUNCTION outbox.release_lease(text, bigint, timestamptz) SECURITY DEFINER;
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
  outbox.release_lease(text, bigint, timestamptz)
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
-- The claim behind claim_batch (mode 'lease', partitioned queues; claim_batch leases unpartitioned
-- rows in one statement of its own) and claim_locked (mode 'lock'). Returns the ids of the claimed
-- rows; the caller reads them back. Deliverable = unsent, not poisoned, due, lease free or expired,
-- and on a partitioned queue the first deliverable row of its partition.
--
-- Partitioned queues claim through outbox.partition_heads (one row per partition with pending
-- work), never through the pending rows themselves, so blocked successors, heads in backoff and
-- poisoned rows cost nothing: a head backing off is "parked" until its time and woken (at most a
-- bounded number per call) when that time has come; a head whose row is leased stays ready and is
-- passed over with one probe. Heads are locked FOR NO KEY UPDATE SKIP LOCKED, which concurrent
-- claimers skip and producers (who hold only advisory locks) do not wait for. Each candidate is
-- still checked against the FIFO rule on the queue table, from the partition's floor (below it
-- every row is sent or poisoned), so poisoned rows in front of a head are not walked again.
--
-- p_run > 1 (claim_batch's and claim_locked's run_length): with each head claimed, the rows that
-- follow it in its partition (outbox._claim_run), up to p_run per partition and p_batch_size in
-- all, so that a partition's run costs one head search and, recorded together, one head write.
CREATE OR REPLACE FUNCTION outbox._claim(p_q outbox.queues, p_batch_size integer, p_lease interval, p_mode text,
                                         p_run integer)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table regclass := p_q.table_oid::regclass;
  -- Due and lease times against the clock, not now(): a claim in a transaction that began long ago
  -- must neither miss what has become due since nor hand out a lease that has already run out.
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_due constant text := 't.sent_at IS NULL AND t.attempt_count < $2
    AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= $now)
    AND (t.leased_until IS NULL OR t.leased_until <= $now)';
  v_all bigint[] := '{}';
  v_ids bigint[];
  v_keys text[];
  v_heads bigint[];
  v_floors bigint[];
  v_claimed_keys text[];
  v_stale text[];
  v_remaining integer := p_batch_size;
  v_until timestamptz;
  v_leased_until timestamptz;
  -- Where this session's last claim of this queue stopped among fresh heads (attempt_count 0), in
  -- head_id order, and when that run of claims started from the front (epoch seconds). Heads a claim
  -- or result moved on leave dead index entries in front of the live ones until vacuum removes them,
  -- which it can not while another session holds the xmin horizon: starting past them keeps a claim
  -- from walking the whole drain's history. A per-session hint only: a claim that finds fewer heads
  -- past it than it wants goes on from the front, and a cursor older than a second is not used.
  -- Heads behind every cursor (a lease that ran out, a row given back, a claim rolled back) are
  -- reached by the one claim per second per queue that searches from the front (the queue's shared
  -- hints, below); a session without a cursor starts where that search stopped. Retried heads
  -- (attempt_count > 0) are always searched from the front, after the fresh ones.
  v_cursor constant text := 'pgdrain.claim_cursor_' || p_q.queue_id;
  v_cursor_value constant text[] := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_cursor, true), ''), ',');
  v_run_started double precision := CASE
    WHEN v_cursor_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_cursor_value[2]::double precision END;
  v_from_head bigint := CASE WHEN v_run_started IS NOT NULL THEN v_cursor_value[1]::bigint END;
  v_last_fresh bigint;
  v_front_duty boolean := false;
  v_only_fresh boolean;
  -- The queue's shared hints (outbox._install_claim_hints); NULL when the queue has none.
  v_start constant regclass := pg_catalog.to_regclass('outbox.claim_start_q' || p_q.queue_id);
  v_front_hint constant regclass := pg_catalog.to_regclass('outbox.claim_front_q' || p_q.queue_id);
  v_now_ms constant bigint := (pg_catalog.date_part('epoch', v_now) * 1000)::bigint;
  v_front_ms bigint;
  v_seen text[] := '{}';
  -- A head whose row is in flight (leased, the lease running) is passed over without a lock: a
  -- claim that locked it would hold it until its commit (its WAL flush), and the result that moves
  -- the head on would wait for that.
  v_not_in_flight constant text := pg_catalog.format(
    'NOT EXISTS (SELECT 1 FROM %s t WHERE t.id = h.head_id AND t.leased_until > $5)', v_table);
  -- Where a search stopped is the largest head id it saw, as its snapshot saw it. A head that a
  -- result moved on after the search's snapshot was taken comes back locked in its new version
  -- (READ COMMITTED re-reads a row it locks), with the id of its key's next row, as far ahead as
  -- that row is: taken as the stop, it sent every replica's next claim past the queue's last head
  -- and on to the front (about half the claims of 4 replicas searched the front again). A version
  -- the statement's snapshot does not see is such a head, and is left out of the stop (our own
  -- transaction's writes are seen, though its xid may be past the snapshot's xmax).
  v_seen_by_search constant text :=
    '(s.written_by = (SELECT pg_catalog.xid(pg_catalog.pg_current_xact_id_if_assigned()))
      OR pg_catalog.age(s.written_by) > (SELECT pg_catalog.age(pg_catalog.xid(pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()))))
         AND s.written_by <> ALL (ARRAY(SELECT pg_catalog.xid(pg_catalog.pg_snapshot_xip(pg_catalog.pg_current_snapshot())))))';
  v_busy text[];
  v_front boolean;
  v_asked integer;
  v_run_ids bigint[];
  -- Rows a claimed head brings with it (itself included): how many heads to ask for. Starts from
  -- what this session's claims of the queue learnt (a per-session hint, like the cursor): starting
  -- every claim from p_run asked for too few heads whenever runs are shorter, and every claim then
  -- searched, leased and extended runs twice. A pass with budget left over measures the rows per
  -- head; one that the batch cut short only says they are at least that many, and keeps the larger
  -- estimate. An estimate older than a second is not used, so longer runs are found again (that
  -- claim may take two passes).
  v_run_hint constant text := 'pgdrain.run_rows_' || p_q.queue_id;
  v_run_hint_value constant text[] := CASE WHEN p_run > 1 THEN pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_run_hint, true), ''), ',') END;
  v_run_hint_since double precision := CASE
    WHEN v_run_hint_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_run_hint_value[2]::double precision END;
  v_rows_per_head numeric := CASE WHEN p_run <= 1 THEN 1
    WHEN v_run_hint_since IS NULL THEN p_run
    ELSE LEAST(p_run, GREATEST(1, v_run_hint_value[1]::numeric)) END;
  v_seen_per_head numeric;
  -- Lock mode: rows this transaction already holds from an earlier claim_locked. SKIP LOCKED does
  -- not skip our own locks, so without excluding them before the LIMIT they would take the places
  -- of rows that can still be claimed.
  v_held bigint[] := CASE WHEN p_mode = 'lock' THEN COALESCE(pg_catalog.string_to_array(NULLIF(
    pg_catalog.current_setting('pgdrain.held_' || p_q.queue_id, true), ''), ',')::bigint[], '{}') ELSE '{}' END;
BEGIN
  IF p_q.partition_column IS NULL THEN  -- lock mode only (see above)
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s AND t.id <> ALL ($4)
         ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, pg_catalog.replace(v_due, '$now', '$3')),
      'integer, integer, timestamptz, bigint[]', 'TABLE(pgdrain_ids bigint[])')
      INTO v_all USING p_batch_size, p_q.max_attempts, v_now, v_held;
    RETURN COALESCE(v_all, '{}');
  END IF;

  -- Heads not built (after a crash): the first claim rebuilds them. Another claim's transaction
  -- rebuilding them now holds the rebuild lock until it ends, a whole lock-mode batch: not waited
  -- for. This claim takes what the heads there are offer (each is checked against the FIFO rule from
  -- its floor, so a partial set is only incomplete), and the rebuilder's commit wakes the drainers.
  -- (Two IFs: the lock is tried only when the heads are not built, never by the usual claim.)
  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    IF pg_catalog.pg_try_advisory_xact_lock(1885823232 + p_q.queue_id, -1) THEN
      PERFORM outbox._restore_heads(p_q);
    END IF;
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now. Its first statement (a SERIALIZABLE transaction: every one)
  -- noted them in its hook (outbox._note_written).
  -- (A transaction that has written nothing has no xid, and looks no further.)
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL
     AND (EXISTS (SELECT 1 FROM outbox.commit_notes n
                  WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = p_q.table_oid)
          OR EXISTS (SELECT 1 FROM outbox.commit_hooks h
                     WHERE h.xid = pg_catalog.pg_current_xact_id() AND p_q.table_oid = ANY (h.table_oids))) THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY(
      SELECT DISTINCT u.k FROM outbox.commit_notes n CROSS JOIN LATERAL pg_catalog.unnest(n.keys) AS u(k)
      WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = p_q.table_oid
      UNION
      SELECT u.k FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids, h.keys) AS u(table_oid, k)
      WHERE h.xid = pg_catalog.pg_current_xact_id() AND u.table_oid = p_q.table_oid));
  END IF;

  -- What producers could not write to heads a claim held while they committed.
  IF EXISTS (SELECT 1 FROM outbox.partition_wakes w WHERE w.queue_id = p_q.queue_id) THEN
    PERFORM outbox._apply_wakes(p_q);
  END IF;

  -- Wake parked heads whose lease or backoff has ended, oldest first, a bounded number per call.
  -- By ctid: a TID scan touches exactly these heads whatever the statistics say.
  UPDATE outbox.partition_heads h SET parked_until = NULL
  WHERE h.ctid = ANY (ARRAY(
    SELECT w.ctid FROM outbox.partition_heads w
    WHERE w.queue_id = p_q.queue_id AND w.parked_until <= v_now
    ORDER BY w.parked_until
    LIMIT GREATEST(4 * p_batch_size, 64)
    FOR NO KEY UPDATE SKIP LOCKED));

  -- No cursor of this session's own (a new session, or its run started over a second ago): only one
  -- claim per second per queue searches from the front, the one that finds the last search a second
  -- old, and leaves where it stopped as the queue's start; the others start there, past the dead
  -- entries the drain left in front (which a held xmin keeps), and their run is as old as that search.
  IF v_from_head IS NULL AND v_front_hint IS NOT NULL AND v_start IS NOT NULL THEN
    v_front_ms := pg_catalog.pg_sequence_last_value(v_front_hint);
    IF v_front_ms > v_now_ms - 1000 AND v_front_ms <= v_now_ms THEN
      v_from_head := pg_catalog.pg_sequence_last_value(v_start);
      v_run_started := v_front_ms / 1000.0;
    ELSE
      PERFORM pg_catalog.setval(v_front_hint, v_now_ms);
      v_front_duty := true;
    END IF;
  END IF;

  -- Lease mode: a cursor of this session's own goes on from where any claim of the queue last
  -- stopped among fresh heads, if that is further. The heads between were leased by other sessions
  -- (replicas): walking them cost each of four replicas the other three's claims (sampled claims in
  -- a 4-replica drain read 3-4x the buffers of a claim at rest; 1x with this). Not in lock mode,
  -- where it measured slower: a head another batch holds is skipped by its lock, and jumping past
  -- heads that batch then hands back sends more claims to the front.
  IF p_mode = 'lease' AND v_from_head IS NOT NULL AND v_start IS NOT NULL THEN
    v_from_head := GREATEST(v_from_head, pg_catalog.pg_sequence_last_value(v_start));
  END IF;

  FOR pass IN 1..4 LOOP
    v_front := v_from_head IS NULL;
    v_asked := pg_catalog.ceil(v_remaining / v_rows_per_head)::integer;
    IF NOT v_front THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE %s)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.xmin AS written_by FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 AND h.attempt_count = 0 AND h.head_id > $2
                 AND h.head_id <> ALL ($3) AND h.partition_key <> ALL ($4)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $6
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, v_not_in_flight),
        'integer, bigint, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint)')
        INTO v_keys, v_heads, v_floors, v_last_fresh
        USING p_q.queue_id, v_from_head, v_all || v_held, v_seen, v_now, v_asked;
      -- Too few past the cursor: the next pass goes on from the front; otherwise past these heads
      -- (a head in flight is not walked again by every pass).
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_asked THEN
        v_from_head := NULL;
      ELSE
        v_from_head := COALESCE(v_last_fresh, v_from_head);
      END IF;
    ELSE
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0 AND %s),
                pg_catalog.bool_and(s.attempt_count = 0)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count, h.xmin AS written_by
               FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
                 -- locks: without this a later pass would take them again.
                 AND (h.head_id IS NULL OR h.head_id <> ALL ($2))
                 AND h.partition_key <> ALL ($3)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $5
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, pg_catalog.replace(v_not_in_flight, '$5', '$4')),
        'integer, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint, pgdrain_only_fresh boolean)')
        INTO v_keys, v_heads, v_floors, v_last_fresh, v_only_fresh
        USING p_q.queue_id, v_all || v_held, v_seen, v_now, v_asked;
      v_run_started := pg_catalog.date_part('epoch', v_now);
      -- As many fresh heads as asked for: the next pass goes on past them as from a cursor.
      IF v_only_fresh AND pg_catalog.cardinality(v_keys) = v_asked THEN
        v_from_head := v_last_fresh;
      END IF;
    END IF;
    IF v_keys IS NULL THEN
      EXIT WHEN v_front;
      CONTINUE;
    END IF;
    IF v_last_fresh IS NOT NULL THEN
      -- As numeric: a double's text follows the caller's extra_float_digits (at -15 the time read
      -- 2e+09, a cursor that never aged, and heads behind it waited for another session's claim).
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started::numeric, false);
      -- Every search past the start moves it on, in both modes: a session without a cursor of its
      -- own then starts past the heads just taken. Lock mode left it to the search from the front,
      -- and such a claim walked every head moved in up to a second (3-6x a claim at rest in
      -- 4-replica drains).
      IF v_front_duty AND v_front THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      ELSIF NOT v_front AND v_start IS NOT NULL
            AND v_last_fresh > COALESCE(pg_catalog.pg_sequence_last_value(v_start), 0) THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      END IF;
    END IF;

    -- Lease mode leases what it locks in the same statement (one statement planned, not two),
    -- from the clock once the statement runs (an init plan, read at the first row leased; $7, the
    -- lease), one end for all its rows: a statement that waited for a lock on
    -- the table (DDL, a migration) handed out leases counted from before the wait, over already
    -- when it returned, and another claimer took the rows while the first delivered them.
    v_until := pg_catalog.clock_timestamp() + p_lease;
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH picked AS (
         SELECT t.id, t.%2$I AS key, t.ctid AS version, t.tableoid AS version_table
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS c(id, floor_id, key)
         -- A head must point at a row of its own partition (heads of new keys come from settings a
         -- producer could forge); one that does not is stale and refreshed below.
         JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%4$s
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           -- A floor at the head itself (a head a result moved on, the usual one) leaves no row
           -- below it to look for: no probe.
           AND (c.floor_id >= t.id
                OR NOT EXISTS (SELECT 1 FROM %1$s p
                               WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                                 AND p.sent_at IS NULL AND p.attempt_count < $2
                               OFFSET 0))
         FOR UPDATE OF t SKIP LOCKED),
       claimed AS (%5$s)
       SELECT pg_catalog.array_agg(claimed.id), pg_catalog.array_agg(claimed.key::text),
              pg_catalog.max(claimed.until) FROM claimed',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type,
      CASE WHEN p_mode = 'lease'
           THEN pg_catalog.format(
             -- By the version picked locked (a TID scan), not by id: a second index probe per row.
             -- A version newer than the statement's snapshot (a concurrent release committed
             -- between the snapshot and the lock) is not leased; its head counts as stale below.
             -- With its table: a ctid names a row only within one table, and a queue table
             -- partitioned by range has one per partition (each with its own (0,1)).
             'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(),
                leased_until = GREATEST($6, (SELECT pg_catalog.clock_timestamp() + $7))
              FROM picked WHERE u.ctid = picked.version AND u.tableoid = picked.version_table
              RETURNING u.id, picked.key, u.leased_until AS until', v_table)
           ELSE 'SELECT picked.id, picked.key, NULL::timestamptz AS until FROM picked' END),
      'bigint[], integer, bigint[], text[], timestamptz, timestamptz, interval',
      'TABLE(pgdrain_ids bigint[], pgdrain_keys text[], pgdrain_until timestamptz)')
      INTO v_ids, v_claimed_keys, v_leased_until USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now, v_until, p_lease;
    -- A run's rows end their leases with its head's.
    v_until := COALESCE(v_leased_until, v_until);

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_run > 1 AND v_remaining > 0 THEN
        v_run_ids := outbox._claim_run(p_q, v_ids, v_claimed_keys, p_run - 1, v_remaining, v_now, v_until, p_mode);
        v_all := v_all || v_run_ids;
        v_remaining := v_remaining - pg_catalog.cardinality(v_run_ids);
        v_seen_per_head := (pg_catalog.cardinality(v_ids) + pg_catalog.cardinality(v_run_ids))::numeric
                           / pg_catalog.cardinality(v_ids);
        v_rows_per_head := LEAST(p_run, GREATEST(1, CASE WHEN v_remaining > 0 THEN v_seen_per_head
                                                         ELSE GREATEST(v_seen_per_head, v_rows_per_head) END));
        v_run_hint_since := COALESCE(v_run_hint_since, pg_catalog.date_part('epoch', v_now));
        PERFORM pg_catalog.set_config(v_run_hint,
          pg_catalog.round(v_rows_per_head, 2) || ',' || v_run_hint_since::numeric, false);
      END IF;
    END IF;

    -- Heads not claimed are in flight (their row is leased right now: nothing to refresh, their
    -- result moves them on, and an expired lease makes the row claimable again through the same
    -- head; this call looks at them no more) or stale: pointing at a row that is no longer (or not
    -- yet) the partition's deliverable head, refreshed here.
    -- NOT IN a subquery: a hashed subplan, linear in the keys (<> ALL compared every key with every
    -- claimed one: 0.7 ms per claim of 256 rows, 10 ms of 1,000).
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k NOT IN (SELECT c FROM pg_catalog.unnest(v_claimed_keys) AS c);
    v_busy := NULL;
    IF v_stale IS NOT NULL THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NULL),
                pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NOT NULL)
         FROM unnest($1::bigint[], $2::text[]) AS c(id, key)
         LEFT JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%3$s AND t.sent_at IS NULL
           AND t.attempt_count < $4 AND t.leased_until > $5
           AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= t.leased_until)
         WHERE c.key = ANY ($3)',
        v_table, p_q.partition_column, p_q.partition_type),
        'bigint[], text[], text[], integer, timestamptz', 'TABLE(pgdrain_stale text[], pgdrain_busy text[])')
        INTO v_stale, v_busy USING v_heads, v_keys, v_stale, p_q.max_attempts, v_now;
      v_seen := v_seen || COALESCE(v_busy, '{}');
    END IF;
    IF v_stale IS NOT NULL THEN
      PERFORM outbox._refresh_heads(p_q, v_stale);
    END IF;
    EXIT WHEN v_remaining <= 0;
    -- From the front, fewer heads than asked for and nothing refreshed: there is nothing more.
    EXIT WHEN v_front AND v_stale IS NULL AND pg_catalog.cardinality(v_keys) < v_asked;
  END LOOP;
  RETURN v_all;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER TRUNCATE trigger (pgdrain_truncate) of every queue table: the rows are
-- gone, so is everything derived from them. Deletes the queue's partition heads (they would point
-- at rows that no longer exist, with floors above the ids a RESTART IDENTITY hands out again) and
-- its clocks (they would make every later commit "late") and wake notes, and forgets this transaction's note of the
-- table for its commit step (their rows went with the TRUNCATE). The built-mark stays: an empty
-- table's heads are complete. TRUNCATE holds ACCESS EXCLUSIVE until the transaction ends, so no
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
-- +goose StatementEnd

-- +goose StatementBegin
-- Applies the wake notes producers left for a queue (outbox.partition_wakes, see
-- outbox.tg_queue__commit): a committed row of the note's key whose head a claim held at the
-- time. Each noted partition gets what the producer could not write itself: a head if it has
-- none, an empty head pointed at the row and woken, a floor lowered to the row. Notes of a head
-- that is still held stay for a later claim; a bounded number per call, oldest first.
-- Returns the keys it applied, for the caller to refresh.
-- Never waits for another claim: a head that another open transaction is making (a lock-mode batch
-- that applied a note of the key keeps its new head uncommitted for the whole batch) would hold
-- this insert on its index entry until that batch ends, and every claim of the queue behind it,
-- and two batches each making a head the other wants deadlocked. The insert gives up after
-- lock_timeout instead, in a block of its own (entered only when notes make heads), then key by
-- key, and the notes of a head it could not make stay for a later claim.
CREATE OR REPLACE FUNCTION outbox._apply_wakes(p_q outbox.queues)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET lock_timeout = '1ms'
AS $$
DECLARE
  v_notes tid[];
  v_keys text[];
  v_lows bigint[];
  v_fixed text[];
  v_made text[];
BEGIN
  SELECT pg_catalog.array_agg(w.ctid) INTO v_notes
  FROM (SELECT x.ctid FROM outbox.partition_wakes x WHERE x.queue_id = p_q.queue_id
        LIMIT 256 FOR UPDATE SKIP LOCKED) w;
  IF v_notes IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT pg_catalog.array_agg(s.k ORDER BY s.k), pg_catalog.array_agg(s.lo ORDER BY s.k)
    INTO v_keys, v_lows
  FROM (SELECT w.partition_key AS k, pg_catalog.min(w.low_id) AS lo FROM outbox.partition_wakes w
        WHERE w.ctid = ANY (v_notes) GROUP BY 1) s;

  -- Heads we can lock now (or that do not exist: made here) take the note; the others wait.
  -- SKIP LOCKED does not keep the lock from waiting on a head that a transaction that committed
  -- after this statement's snapshot moved and another holds now ("while locking updated version of
  -- tuple"): the lock_timeout ends that wait, and these notes then wait for a later claim (the error
  -- escaped the claim, which failed with 55P03). A block entered only by claims with notes.
  BEGIN
  WITH held AS (
    SELECT h.partition_key FROM outbox.partition_heads h
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
    FOR NO KEY UPDATE SKIP LOCKED),
  fixed AS (
    UPDATE outbox.partition_heads h
    SET head_id = COALESCE(h.head_id, u.lo),
        parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
        floor_id = LEAST(h.floor_id, u.lo)
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k AND u.k IN (SELECT held.partition_key FROM held)
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(fixed.partition_key) INTO v_fixed FROM fixed;
  EXCEPTION WHEN lock_not_available THEN
    v_fixed := NULL;
  END;

  IF EXISTS (SELECT 1 FROM unnest(v_keys) AS u(k)
             WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                               WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)) THEN
    BEGIN
      WITH made AS (
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        -- Floor 0: notes of the key beyond this call's may hold smaller ids.
        SELECT p_q.queue_id, u.k, u.lo, 0
        FROM unnest(v_keys, v_lows) AS u(k, lo)
        WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                          WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
        ORDER BY u.k
        ON CONFLICT (queue_id, partition_key) DO NOTHING
        RETURNING h.partition_key)
      SELECT pg_catalog.array_agg(made.partition_key) INTO v_made FROM made;
    EXCEPTION WHEN lock_not_available THEN
      -- One key by one, so that the head another transaction is making holds back only its key.
      v_made := NULL;
      FOR i IN 1..pg_catalog.cardinality(v_keys) LOOP
        BEGIN
          INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
          SELECT p_q.queue_id, v_keys[i], v_lows[i], 0
          WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                            WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_keys[i])
          ON CONFLICT (queue_id, partition_key) DO NOTHING;
          IF FOUND THEN
            v_made := v_made || v_keys[i];
          END IF;
        EXCEPTION WHEN lock_not_available THEN
          NULL;
        END;
      END LOOP;
    END;
  END IF;

  v_fixed := v_fixed || v_made;
  DELETE FROM outbox.partition_wakes w
  WHERE w.ctid = ANY (v_notes) AND w.partition_key = ANY (v_fixed);
  RETURN v_fixed;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Finds the pending deliverable rows of a partitioned queue that no claim can reach, and (unless
-- dry_run) makes them reachable again. Partition heads, floors and parks are a cache of the queue
-- table (outbox.partition_heads); this checks the cache against the table, one key at a time:
--   missing_head     the key has a deliverable row but no head: no claim would ever look at it;
--   floor_above_row  the head's floor (below it, everything is taken to be sent or poisoned) is above
--                    the key's first deliverable row: that row would never be found;
--   parked_past_due  the head is parked (lease or backoff) more than a second past the time its first
--                    deliverable row is due;
--   stale_notes      (no key) a transaction that wrote the queue ended without its commit step
--                    (pgdrain_commit disabled): its notes in outbox.commit_notes (or, SERIALIZABLE,
--                    in its row of outbox.commit_hooks) are deleted.
-- Every fix moves the cache the safe way (a head is made or pointed at the first deliverable row, a
-- floor lowered, a park ended): a claim re-checks every head against the table, so a fix that
-- raced another session is harmless. Heads locked by a claim right now are skipped (their claim
-- refreshes them). Cost: one walk over the distinct keys with unsent rows (a skip scan of the
-- partition index) plus, per key, its poisoned rows in front of its first deliverable one: it grows
-- with partitions, not with rows. One repair per queue at a time (advisory lock (1885823232 +
-- queue_id, -3), tried, never waited for: a second caller returns nothing).
-- Every problem is returned (and, when fixed, raised as a WARNING for the server log and counted in
-- outbox.repairs); an empty result means the cache was right. Unpartitioned queues keep no cache.
CREATE OR REPLACE FUNCTION outbox.repair(queue text, dry_run boolean DEFAULT false)
RETURNS TABLE(partition_key text, cause text, head_id bigint, detail text)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_material = off
SET jit = off
AS $$
DECLARE
  fn constant text := 'repair';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_noted text[] := '{}';
  r record;
BEGIN
  IF dry_run IS NULL THEN
    PERFORM outbox._invalid(fn, 'dry_run must not be NULL');
  END IF;
  IF v_q.partition_column IS NULL
     OR NOT pg_catalog.pg_try_advisory_xact_lock(1885823232 + v_q.queue_id, -3)
     -- Not built yet (after a crash): the next claim rebuilds every head anyway.
     OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id) THEN
    RETURN;
  END IF;

  -- Keys this very transaction wrote whose commit step has not run yet (a requeue_poisoned or a
  -- producer before the repair, in one transaction): that step makes or moves their heads, as a
  -- claim in the same transaction does first (outbox._claim). Not problems.
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
    SELECT COALESCE(pg_catalog.array_agg(u.k), '{}') INTO v_noted
    FROM (SELECT x.k FROM outbox.commit_notes n CROSS JOIN LATERAL pg_catalog.unnest(n.keys) AS x(k)
          WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = v_q.table_oid
          UNION
          SELECT x.k FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids, h.keys) AS x(table_oid, k)
          WHERE h.xid = pg_catalog.pg_current_xact_id() AND x.table_oid = v_q.table_oid) u;
  END IF;

  -- Every per-key lookup is a LATERAL probe of an index (OFFSET 0 keeps it one: the planner must not
  -- turn it into a join). The CTE's row estimate is tiny whatever the queue holds, and given a join
  -- the planner materialized every head of the queue and compared each key with each of them:
  -- 16,666 keys took 20 s, keys squared.
  FOR r IN EXECUTE pg_catalog.format(
    'WITH RECURSIVE keys(k) AS (
       (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL ORDER BY t.%2$I LIMIT 1)
       UNION ALL
       SELECT (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL AND t.%2$I > keys.k ORDER BY t.%2$I LIMIT 1)
       FROM keys WHERE keys.k IS NOT NULL)
     SELECT s.key, s.cause, s.head_id, s.row_id, s.detail FROM (
       SELECT keys.k::text AS key, h.head_id, f.id AS row_id,
              CASE WHEN h.present IS NULL THEN ''missing_head''
                   WHEN h.floor_id > f.id THEN ''floor_above_row''
                   WHEN h.parked_until > f.due + interval ''1 second'' THEN ''parked_past_due'' END AS cause,
              CASE WHEN h.present IS NULL THEN pg_catalog.format(''row %%s has no partition head'', f.id)
                   WHEN h.floor_id > f.id THEN pg_catalog.format(''floor %%s is above row %%s'', h.floor_id, f.id)
                   ELSE pg_catalog.format(''head parked until %%s, row %%s due at %%s'', h.parked_until, f.id, f.due)
              END AS detail
       FROM keys
       CROSS JOIN LATERAL (
         SELECT t.id, GREATEST(t.next_attempt_at, t.leased_until, $3) AS due FROM %1$s t
         WHERE t.%2$I = keys.k AND t.sent_at IS NULL AND t.attempt_count < $2
         ORDER BY t.id LIMIT 1) f
       LEFT JOIN LATERAL (
         SELECT true AS present, x.head_id, x.floor_id, x.parked_until FROM outbox.partition_heads x
         WHERE x.queue_id = $1 AND x.partition_key = keys.k::text
         OFFSET 0) h ON true
       -- A key with a wake note is not stuck: the next claim applies the note (outbox._apply_wakes).
       CROSS JOIN LATERAL (
         SELECT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                        WHERE w.queue_id = $1 AND w.partition_key = keys.k::text) AS noted
         OFFSET 0) n
       WHERE keys.k IS NOT NULL AND NOT n.noted AND keys.k::text <> ALL ($4)) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_now, v_noted
  LOOP
    IF NOT dry_run THEN
      IF r.cause = 'missing_head' THEN
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        VALUES (v_q.queue_id, r.key, r.row_id, r.row_id)
        ON CONFLICT ON CONSTRAINT partition_heads_pkey DO NOTHING;
      ELSE
        UPDATE outbox.partition_heads h
        SET head_id = r.row_id, parked_until = NULL, floor_id = LEAST(h.floor_id, r.row_id)
        WHERE h.ctid = (SELECT x.ctid FROM outbox.partition_heads x
                        WHERE x.queue_id = v_q.queue_id AND x.partition_key = r.key
                        FOR NO KEY UPDATE SKIP LOCKED);
      END IF;
      CONTINUE WHEN NOT FOUND;
      RAISE WARNING 'pgdrain repair: queue %, partition %: % (%)', v_q.queue, r.key, r.cause, r.detail;
      INSERT INTO outbox.repairs AS c (queue, cause, repairs, last_repair_at)
      VALUES (v_q.queue, r.cause, 1, v_now)
      ON CONFLICT ON CONSTRAINT repairs_pkey DO UPDATE SET repairs = c.repairs + 1, last_repair_at = EXCLUDED.last_repair_at;
    END IF;
    partition_key := r.key;
    cause := r.cause;
    head_id := r.head_id;
    detail := r.detail;
    RETURN NEXT;
  END LOOP;
  IF NOT dry_run AND FOUND THEN
    PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  END IF;

  -- Notes of transactions that ended without running their commit step (pgdrain_commit was
  -- disabled): never read again, they would stay forever. The rows they noted were checked above
  -- like any other; the notes are only garbage.
  FOR r IN
    SELECT s.xid, pg_catalog.sum(s.notes) AS notes
    FROM (SELECT n.xid, pg_catalog.count(*) AS notes
          FROM outbox.commit_notes n
          WHERE n.table_oid = v_q.table_oid
            AND pg_catalog.pg_xact_status(n.xid) IS DISTINCT FROM 'in progress'
          GROUP BY n.xid
          UNION ALL
          -- The first statement's notes (a SERIALIZABLE transaction's: all) are in its hook, one entry
          -- per row (outbox._note_written).
          SELECT h.xid, pg_catalog.count(*)
          FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids) AS o(table_oid)
          WHERE o.table_oid = v_q.table_oid
            AND pg_catalog.pg_xact_status(h.xid) IS DISTINCT FROM 'in progress'
          GROUP BY h.xid) s
    GROUP BY s.xid
    ORDER BY s.xid
  LOOP
    detail := pg_catalog.format('%s notes of transaction %s, which ended without its commit step', r.notes, r.xid);
    IF NOT dry_run THEN
      DELETE FROM outbox.commit_notes n WHERE n.xid = r.xid AND n.table_oid = v_q.table_oid;
      DELETE FROM outbox.commit_hooks h WHERE h.xid = r.xid;
      RAISE WARNING 'pgdrain repair: queue %: stale_notes (%)', v_q.queue, detail;
      INSERT INTO outbox.repairs AS c (queue, cause, repairs, last_repair_at)
      VALUES (v_q.queue, 'stale_notes', 1, v_now)
      ON CONFLICT ON CONSTRAINT repairs_pkey DO UPDATE SET repairs = c.repairs + 1, last_repair_at = EXCLUDED.last_repair_at;
    END IF;
    partition_key := NULL;
    cause := 'stale_notes';
    head_id := NULL;
    RETURN NEXT;
  END LOOP;
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
  SELECT '0.1.0'::text, 48;
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
ALTER FUNCTION outbox.release_lease(text, bigint, timestamptz) SECURITY DEFINER;
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
  outbox.release_lease(text, bigint, timestamptz)
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
