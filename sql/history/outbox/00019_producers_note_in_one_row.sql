-- +goose Up
-- +goose StatementBegin
-- Producers' commit step in fewer statements (issue 14).
-- The commit step takes a hash's commit lock and raises its clock in one statement, keeping the
-- clock it found (outbox._commit_partitions): NULL until the first commit step after this migration.
ALTER TABLE outbox.partition_clocks ADD COLUMN previous_max bigint;
COMMENT ON COLUMN outbox.partition_clocks.previous_max IS
  'The clock as the last commit step of this hash found it, before raising it (internal).';

-- A transaction's notes for its commit step move from transaction-local settings (six of them,
-- read and written on every statement; a producer could set them) into its row of
-- outbox.commit_hooks per table, which only the definer's triggers write. The table is empty when
-- no producer is open; DROP waits for those that are.
DROP FUNCTION outbox._commit_partitions(outbox.queues);
DROP FUNCTION outbox._noted_keys(outbox.queues, boolean);
DROP FUNCTION outbox._note_written(oid, text[], bigint[], bigint[]);
DROP TABLE outbox.commit_hooks;
CREATE UNLOGGED TABLE outbox.commit_hooks (
  xid xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
  table_oid oid NOT NULL,
  -- Each noted row's key and id (aligned, in the order noted); NULL once they would pass 1,024
  -- entries, and from then on the span of ids, lo..hi, is all there is.
  keys text[],
  ids bigint[],
  lo bigint NOT NULL,
  hi bigint NOT NULL,
  PRIMARY KEY (xid, table_oid)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
COMMENT ON TABLE outbox.commit_hooks IS
  'Producers'' open transactions: what each wrote to a partitioned queue, for its commit step (internal; empty when idle).';
-- +goose StatementEnd

-- +goose StatementBegin
-- Commit step of one partitioned queue for the current transaction (called by
-- outbox._commit_partitions with the keys it wrote and their ids, repeats allowed; p_locked: the
-- commit locks of their hashes are taken, step 1 is done): makes per-key delivery order equal
-- commit order, and gives new keys their partition head.
--
-- 1. Takes the commit lock of every key hash the transaction wrote (hashtext(key) & 65535), held
--    until the commit is complete: the hash's row of outbox.partition_clocks, made or updated in
--    hash order by one INSERT ... ON CONFLICT DO UPDATE, which also raises the clock to our largest
--    id and keeps the value it found in previous_max. A row lock, not an advisory one: a bulk
--    transaction of 20,000 keys locks 20,000 rows without filling the lock table, and producers of
--    other hashes never wait for it. Commits that share a hash are serialised from here on; only
--    commit steps take these locks, all in one order, so they can not deadlock.
-- 2. A key is late when a transaction that committed before us wrote a row of it (or of a key
--    with the same hash) with a larger id than our smallest: the clock keeps the largest committed
--    id per hash, written only under these locks. A late key's rows of this transaction get new
--    ids from the id sequence, in their order, larger than every id already given out: delivered
--    order (id order) is then commit order, and the clock follows them. Not late (the usual case):
--    no row is written twice.
-- 3. Holds each existing head of its keys FOR KEY SHARE until the transaction ends, so that no claim
--    deletes it or raises its floor over our rows before they are visible (a claim takes FOR UPDATE,
--    and skips heads it can not lock, see outbox._refresh_heads); creates the heads of new keys,
--    wakes a head a claim left empty while we were open, and lowers a floor that lies above our
--    rows. It never waits for a claim: a head a claim holds (SKIP LOCKED) gets a wake note in
--    outbox.partition_wakes instead, which the next claim applies once that claim is over.
--    NOTIFY when a partition became claimable.
-- Returns whether it wrote a head or a wake note (and notified).
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
-- Heads are not locked there (a lock on a version newer than the snapshot fails with 40001 too,
-- and claims move heads all the time): every key with a head gets a wake note.
CREATE OR REPLACE FUNCTION outbox._commit_keys(p_q outbox.queues, p_keys text[], p_mins bigint[], p_maxs bigint[],
                                              p_locked boolean)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
  v_renumbered boolean := false;
  v_issued bigint;
  v_sequence constant regclass := p_q.id_sequence;
  v_any_late boolean;
  v_late_clocks bigint[];
  -- Per key, aligned with v_keys: what the commit step must do for it (see the probe below).
  v_states text[];
  v_new text[];
  v_fix text[];
  v_contended text[];
  -- Keys whose head another session made or took between our probe and our write.
  v_raced text[];
  v_raced_now text[];
  v_wrote boolean := false;
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  v_keys := p_keys;
  v_mins := p_mins;
  v_maxs := p_maxs;
  IF NOT p_locked THEN
    v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
    WITH noted AS (
      SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi, pg_catalog.hashtext(u.k) & 65535 AS slot
      FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
      GROUP BY u.k),
    locked AS (
      INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
      SELECT p_q.queue_id, n.slot, GREATEST(p_q.clock_base, LEAST(pg_catalog.max(n.hi), v_issued)), p_q.clock_base
      FROM noted n GROUP BY n.slot ORDER BY n.slot
      ON CONFLICT (queue_id, slot) DO UPDATE
        SET previous_max = c.committed_max,
            committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max))
    SELECT pg_catalog.array_agg(n.k ORDER BY n.k), pg_catalog.array_agg(n.lo ORDER BY n.k),
           pg_catalog.array_agg(n.hi ORDER BY n.k)
      INTO v_keys, v_mins, v_maxs
    FROM noted n;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of its clock as we found it and of its head (LATERAL: index probes whatever
  -- the statistics of these small tables say). Late keys are renumbered, then probed again.
  LOOP
    SELECT pg_catalog.bool_or(c.previous_max > u.lo),
           pg_catalog.array_agg(CASE WHEN c.previous_max > u.lo THEN c.previous_max END ORDER BY u.k),
           pg_catalog.array_agg(s.state ORDER BY u.k),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'new'),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'fix'),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'contended')
      INTO v_any_late, v_late_clocks, v_states, v_new, v_fix, v_contended
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    LEFT JOIN LATERAL (SELECT x.previous_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535) c ON true
    -- The head's latest version, held until we commit; none when a claim holds it (or, under
    -- REPEATABLE READ or SERIALIZABLE, always).
    LEFT JOIN LATERAL (SELECT true AS held, x.head_id, x.floor_id FROM outbox.partition_heads x
                       WHERE v_read_committed AND x.queue_id = p_q.queue_id AND x.partition_key = u.k
                       FOR KEY SHARE SKIP LOCKED) h ON true
    -- new: no head yet; fix: a head we hold that a claim left empty, or whose floor is above our
    -- rows; contended: a head a claim holds (a wake note). Whether a head exists is only asked
    -- when we hold none.
    CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                    WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                     WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                      THEN 'new'
                                    ELSE 'contended' END AS state) s;
    EXIT WHEN NOT v_any_late OR v_renumbered;
    -- v_keys is in key order, and so are the clocks aggregated above and what comes back.
    SELECT pg_catalog.array_agg(r.k ORDER BY r.k), pg_catalog.array_agg(r.lo ORDER BY r.k),
           pg_catalog.array_agg(r.hi ORDER BY r.k)
      INTO v_keys, v_mins, v_maxs
    FROM outbox._renumber_late_rows(p_q, v_sequence, v_keys, v_mins, v_maxs, v_late_clocks) r;
    v_renumbered := true;
    -- The late keys' rows now end above every clock: their clocks follow.
    v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
    UPDATE outbox.partition_clocks c
    SET committed_max = GREATEST(c.committed_max, LEAST(r.hi, v_issued))
    FROM (SELECT pg_catalog.hashtext(u.k) & 65535 AS slot, pg_catalog.max(u.hi) AS hi
          FROM unnest(v_keys, v_maxs, v_late_clocks) AS u(k, hi, clock)
          WHERE u.clock IS NOT NULL GROUP BY 1) r
    WHERE c.queue_id = p_q.queue_id AND c.slot = r.slot;
  END LOOP;

  -- New keys get their heads, a head a claim left empty while we were open is woken, and a floor
  -- above our rows (ids given explicitly, which are not renumbered) is lowered. A head another
  -- session holds or made meanwhile is left to a wake note. NOTIFY when anything was written: a
  -- partition became (or may have become) claimable.
  IF v_new IS NOT NULL THEN
    -- A new head's floor is our smallest id (poisoned rows before it are not walked again) only
    -- while the queue's heads are complete and no wake note waits for the key: after a crash "no
    -- head" may mean the heads were lost while older rows of the key are still pending, and a note
    -- means a producer before us committed rows of the key while a claim was deleting its head
    -- (the note is applied by a later claim, which a claim of our row must not overtake). Then the
    -- floor is 0 until a claim raises it.
    WITH made AS (
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo,
             CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                       AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                       WHERE w.queue_id = p_q.queue_id AND w.partition_key = u.k)
                  THEN u.lo ELSE 0 END
      -- Filtered on the aligned state, not with u.k = ANY (v_new): that compares every key with
      -- every new key (a 192,000-row bulk load of 32,000 new keys spent 9.6 s here).
      FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
      WHERE u.state = 'new'
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_raced_now FROM pg_catalog.unnest(v_new) AS k
    WHERE k NOT IN (SELECT made.partition_key FROM made);
    v_raced := v_raced || v_raced_now;
    v_wrote := true;
  END IF;
  IF v_fix IS NOT NULL THEN
    -- One locking probe per key (skipped when a claim took the head since), then the heads updated
    -- by ctid: linear in the keys.
    WITH locked AS (
      SELECT x.tid, u.lo FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
      CROSS JOIN LATERAL (SELECT h.ctid AS tid FROM outbox.partition_heads h
                          WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k
                          FOR NO KEY UPDATE SKIP LOCKED) x
      WHERE u.state = 'fix'),
    fixed AS (
      UPDATE outbox.partition_heads h
      SET head_id = COALESCE(h.head_id, l.lo),
          parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
          floor_id = LEAST(h.floor_id, l.lo)
      FROM locked l
      WHERE h.ctid = l.tid
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_raced_now
    FROM pg_catalog.unnest(v_fix) AS k
    WHERE k NOT IN (SELECT fixed.partition_key FROM fixed);
    v_raced := v_raced || v_raced_now;
    v_wrote := true;
  END IF;
  IF v_contended IS NOT NULL OR v_raced IS NOT NULL THEN
    -- The OR keeps the IN a hashed subplan (a semi-join here would be a nested loop: hash joins
    -- are off in this function).
    INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id)
    SELECT p_q.queue_id, u.k, u.lo FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
    WHERE u.state = 'contended' OR u.k IN (SELECT r.k FROM pg_catalog.unnest(v_raced) AS r(k));
    v_wrote := true;
  END IF;
  IF v_wrote THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN v_wrote;
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
CREATE OR REPLACE FUNCTION outbox._claim(p_q outbox.queues, p_batch_size integer, p_lease interval, p_mode text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
  v_busy text[];
  v_front boolean;
  v_asked integer;
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

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now.
  IF EXISTS (SELECT 1 FROM outbox.commit_hooks h
             WHERE h.xid = pg_catalog.pg_current_xact_id_if_assigned() AND h.table_oid = p_q.table_oid) THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY(
      SELECT n.k FROM outbox.commit_hooks h CROSS JOIN LATERAL outbox._noted_keys(p_q, h) n
      WHERE h.xid = pg_catalog.pg_current_xact_id() AND h.table_oid = p_q.table_oid));
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

  FOR pass IN 1..4 LOOP
    v_front := v_from_head IS NULL;
    v_asked := v_remaining;
    IF NOT v_front THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 AND h.attempt_count = 0 AND h.head_id > $2
                 AND h.head_id <> ALL ($3) AND h.partition_key <> ALL ($4)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $6
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_not_in_flight),
        'integer, bigint, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint)')
        INTO v_keys, v_heads, v_floors, v_last_fresh
        USING p_q.queue_id, v_from_head, v_all || v_held, v_seen, v_now, v_remaining;
      -- Too few past the cursor: the next pass goes on from the front; otherwise past these heads
      -- (a head in flight is not walked again by every pass).
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_remaining THEN
        v_from_head := NULL;
      ELSE
        v_from_head := v_last_fresh;
      END IF;
    ELSE
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0),
                pg_catalog.bool_and(s.attempt_count = 0)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
                 -- locks: without this a later pass would take them again.
                 AND (h.head_id IS NULL OR h.head_id <> ALL ($2))
                 AND h.partition_key <> ALL ($3)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $5
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', pg_catalog.replace(v_not_in_flight, '$5', '$4')),
        'integer, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint, pgdrain_only_fresh boolean)')
        INTO v_keys, v_heads, v_floors, v_last_fresh, v_only_fresh
        USING p_q.queue_id, v_all || v_held, v_seen, v_now, v_remaining;
      v_run_started := pg_catalog.date_part('epoch', v_now);
      -- As many fresh heads as asked for: the next pass goes on past them as from a cursor.
      IF v_only_fresh AND pg_catalog.cardinality(v_keys) = v_remaining THEN
        v_from_head := v_last_fresh;
      END IF;
    END IF;
    IF v_keys IS NULL THEN
      EXIT WHEN v_front;
      CONTINUE;
    END IF;
    IF v_last_fresh IS NOT NULL THEN
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started, false);
      IF v_front_duty AND v_front THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      END IF;
    END IF;

    -- Lease mode leases what it locks in the same statement (one statement planned, not two).
    v_until := pg_catalog.clock_timestamp() + p_lease;
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH picked AS (
         SELECT t.id, t.%2$I AS key
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS c(id, floor_id, key)
         -- A head must point at a row of its own partition (heads of new keys come from settings a
         -- producer could forge); one that does not is stale and refreshed below.
         JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%4$s
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           AND NOT EXISTS (SELECT 1 FROM %1$s p
                           WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                             AND p.sent_at IS NULL AND p.attempt_count < $2
                           OFFSET 0)
         FOR UPDATE OF t SKIP LOCKED),
       claimed AS (%5$s)
       SELECT pg_catalog.array_agg(claimed.id), pg_catalog.array_agg(claimed.key::text) FROM claimed',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type,
      CASE WHEN p_mode = 'lease'
           THEN pg_catalog.format(
             'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $6
              FROM picked WHERE u.id = picked.id RETURNING u.id, picked.key', v_table)
           ELSE 'SELECT picked.id, picked.key FROM picked' END),
      'bigint[], integer, bigint[], text[], timestamptz, timestamptz', 'TABLE(pgdrain_ids bigint[], pgdrain_keys text[])')
      INTO v_ids, v_claimed_keys USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now, v_until;

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
    END IF;

    -- Heads not claimed are in flight (their row is leased right now: nothing to refresh, their
    -- result moves them on, and an expired lease makes the row claimable again through the same
    -- head; this call looks at them no more) or stale: pointing at a row that is no longer (or not
    -- yet) the partition's deliverable head, refreshed here.
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k <> ALL (COALESCE(v_claimed_keys, '{}'));
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
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit
-- with the transaction's note of the queue, see outbox._note_written): the keys it wrote go to
-- outbox._commit_keys, which makes per-key delivery order equal commit order and gives new keys
-- their partition head. The usual transaction, one row of a key that has a head and not late,
-- is done here in two scalar statements: every statement of the commit step is an executor start
-- on the producer's write path (aggregates and CTEs, which the general step needs, cost the most
-- to start), and so is every planner setting a function pins.
-- Returns whether it wrote a head or a wake note (and notified).
CREATE OR REPLACE FUNCTION outbox._commit_partitions(p_q outbox.queues, p_note outbox.commit_hooks)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
AS $$
DECLARE
  v_key text;
  v_id bigint;
  v_previous bigint;
  v_head bigint;
  v_floor bigint;
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  IF pg_catalog.cardinality(p_note.keys) = 1 THEN
    -- The commit lock of the key's hash, taken and the clock raised as outbox._commit_keys does.
    v_key := p_note.keys[1];
    v_id := p_note.ids[1];
    INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
    VALUES (p_q.queue_id, pg_catalog.hashtext(v_key) & 65535,
            GREATEST(p_q.clock_base, LEAST(v_id, pg_catalog.pg_sequence_last_value(p_q.id_sequence))),
            p_q.clock_base)
    ON CONFLICT (queue_id, slot) DO UPDATE
      SET previous_max = c.committed_max,
          committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
    RETURNING c.previous_max INTO v_previous;
    IF v_previous <= v_id AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
      SELECT x.head_id, x.floor_id INTO v_head, v_floor
      FROM outbox.partition_heads x
      WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_key
      FOR KEY SHARE SKIP LOCKED;
      IF v_head IS NOT NULL AND v_floor <= v_id THEN
        RETURN false;
      END IF;
    END IF;
    RETURN outbox._commit_keys(p_q, p_note.keys, p_note.ids, p_note.ids, true);
  END IF;

  -- What the transaction's statements noted: each row's key and id as appended (merged per key
  -- there), or, for a transaction of many statements, its rows in the span (outbox._noted_keys).
  IF p_note.keys IS NOT NULL THEN
    RETURN outbox._commit_keys(p_q, p_note.keys, p_note.ids, p_note.ids, false);
  END IF;
  SELECT pg_catalog.array_agg(n.k), pg_catalog.array_agg(n.lo), pg_catalog.array_agg(n.hi)
    INTO v_keys, v_mins, v_maxs
  FROM outbox._noted_keys(p_q, p_note) n;
  IF v_keys IS NULL THEN
    RETURN false;
  END IF;
  RETURN outbox._commit_keys(p_q, v_keys, v_mins, v_maxs, false);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue its heads trigger: a statement-level AFTER INSERT trigger running a
-- function made for this queue, outbox.tg_queue__heads_q<queue_id>, whose one statement names the
-- partition column statically, so PL/pgSQL plans it once per session instead of on every
-- statement (a generic function would need a dynamic EXECUTE). It notes the key and id of each new
-- row in this transaction's row of outbox.commit_hooks: the statement of outbox._note_written,
-- inlined (one function call less on every producer statement), with one aggregate node (the
-- executor start of aggregates is what costs most there). Made again by every create_queue, so it
-- always matches the registration (nothing else reinstalls it: run create_queue again if it was
-- dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write outbox.commit_hooks.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  v_function constant text := 'outbox.' || pg_catalog.quote_ident('tg_queue__heads_q' || p_q.queue_id);
BEGIN
  EXECUTE pg_catalog.format(
    $f$CREATE OR REPLACE FUNCTION %1$s()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = ''
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
BEGIN
  INSERT INTO outbox.commit_hooks AS h (table_oid, keys, ids, lo, hi)
  SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id),
         pg_catalog.min(n.id), pg_catalog.max(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.min(n.id) IS NOT NULL
  ON CONFLICT (xid, table_oid) DO UPDATE
    SET keys = CASE WHEN pg_catalog.cardinality(h.keys) + pg_catalog.cardinality(EXCLUDED.keys) <= 1024
                    THEN h.keys || EXCLUDED.keys END,
        ids = CASE WHEN pg_catalog.cardinality(h.keys) + pg_catalog.cardinality(EXCLUDED.keys) <= 1024
                   THEN h.ids || EXCLUDED.ids END,
        lo = LEAST(h.lo, EXCLUDED.lo),
        hi = GREATEST(h.hi, EXCLUDED.hi);
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose StatementBegin
-- The keys a transaction's note of a partitioned queue (its row of outbox.commit_hooks, see
-- outbox._note_written) covers, each with its smallest and largest id, in key order: from the
-- note's lists, or, past their limit, from this transaction's rows in the note's span of ids.
CREATE OR REPLACE FUNCTION outbox._noted_keys(p_q outbox.queues, p_note outbox.commit_hooks)
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
BEGIN
  IF p_note.keys IS NOT NULL THEN
    RETURN QUERY
      SELECT u.k, pg_catalog.min(u.lo), pg_catalog.max(u.hi)
      FROM unnest(p_note.keys, p_note.ids, p_note.ids) AS u(k, lo, hi)
      GROUP BY u.k ORDER BY u.k;
  ELSIF p_note.lo IS NOT NULL THEN
    -- Rows of the top transaction are known by their xmin; only a savepoint's need the lookup.
    RETURN QUERY EXECUTE pg_catalog.format(
      'SELECT t.%I::text, pg_catalog.min(t.id), pg_catalog.max(t.id) FROM %s t
       WHERE t.id BETWEEN $1 AND $2 AND t.sent_at IS NULL AND (t.xmin = $3 OR outbox._written_here(t.xmin))
       GROUP BY 1 ORDER BY 1', p_q.partition_column, p_q.table_oid::regclass)
      USING p_note.lo, p_note.hi, (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the TRUNCATE
-- trigger and either the NOTIFY trigger (unpartitioned) or the trigger that feeds the commit step
-- (partitioned, whose commit step notifies); then registers the queue. Idempotent: calling it
-- again with new settings updates them; the partition column can not change. An adopted table keeps its rows; missing lease columns are added as
-- NULL = "free". What the table enforces on producers (CHECKs, column privileges) is
-- outbox._guard_queue_table.
-- Registration follows the table: when the registered table was dropped (or dropped and made
-- again) outside drop_queue, the new table is registered under the same queue_id and every piece
-- of state derived from the old one (partition heads, built-mark, clocks) is dropped first; heads
-- are then rebuilt from the new table's rows.
-- A partitioned queue needs the sequence its ids come from (outbox.queues.id_sequence): the commit
-- step renumbers late rows with it.
-- A created table gets fillfactor 50, so writing a lease is a HOT update (no index touched): a row
-- is written twice, leased and then sent, and the sent version (which leaves the partial indexes)
-- also takes room on the page; at 80, 10-23% of the updates of a drain were HOT (of 50% possible),
-- at 50 47-48%, with a fifth less WAL and a table no larger after its drain. And autovacuum
-- settings for a table that is mostly empty and churns.
CREATE OR REPLACE FUNCTION outbox.create_queue(
  queue text,
  partition_column text DEFAULT NULL,
  max_attempts integer DEFAULT 10,
  backoff_min interval DEFAULT '1 second',
  backoff_max interval DEFAULT '30 seconds',
  permanent_policy text DEFAULT 'poison',
  channel text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'create_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_schema text := pg_catalog.split_part(v_name, '.', 1);
  v_table text := pg_catalog.split_part(v_name, '.', 2);
  v_col text := pg_catalog.lower(partition_column);
  v_channel text := COALESCE(channel, 'pgdrain_' || v_schema || '_' || v_table);
  v_rel regclass;
  v_old outbox.queues;
  v_type text;
  v_queue_id integer;
  v_missing text;
  v_has_nulls boolean;
  v_sequence regclass;
  v_other text;
  v_new_table boolean;
  v_created boolean := false;
BEGIN
  IF partition_column IS NOT NULL AND partition_column !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must be a plain column name, got %L', partition_column));
  END IF;
  IF v_col IN ('id', 'event_type', 'payload', 'created_at', 'attempt_count', 'next_attempt_at',
               'sent_at', 'leased_until', 'lease_token', 'last_error') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_max IS NULL OR backoff_max < backoff_min OR backoff_max > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_max must be between backoff_min (%s) and 1 day, got %s',
      backoff_min, COALESCE(backoff_max::text, 'NULL')));
  END IF;
  IF permanent_policy IS NULL OR permanent_policy NOT IN ('poison', 'retry') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'permanent_policy must be ''poison'' or ''retry'', got %L', permanent_policy));
  END IF;
  IF permanent_policy = 'retry' AND v_col IS NOT NULL THEN
    PERFORM outbox._invalid(fn,
      'permanent_policy ''retry'' is not allowed with a partition_column: an event that can never '
      'apply would wedge its partition forever');
  END IF;
  IF v_channel !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'channel must be a plain name of at most 63 characters, got %L', v_channel));
  END IF;
  v_channel := pg_catalog.lower(v_channel);

  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = v_schema) THEN
    RAISE EXCEPTION '%: schema % does not exist', fn, v_schema USING ERRCODE = '3F000';
  END IF;
  v_rel := pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, v_table));

  -- The registration is this table's only while its oid is the table's; a registration whose
  -- table was dropped (and maybe made again) is stale, and the new table is a new queue.
  SELECT * INTO v_old FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF FOUND AND v_old.table_oid = v_rel AND v_old.partition_column IS DISTINCT FROM v_col THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column of registered queue %s is %s and can not change to %s (drop_queue first)',
      v_name, COALESCE(v_old.partition_column, 'NULL'), COALESCE(v_col, 'NULL')));
  END IF;
  IF v_rel IS NOT NULL THEN
    SELECT q.queue INTO v_other FROM outbox.queues q WHERE q.table_oid = v_rel AND q.queue <> v_name;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'table %s is already registered as queue %s (renamed?); drop_queue(%L) first', v_name, v_other, v_other));
    END IF;
  END IF;
  v_new_table := v_old.queue_id IS NULL OR v_old.table_oid IS DISTINCT FROM v_rel;

  IF v_rel IS NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TABLE %I.%I (
         id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
         event_type text NOT NULL,
         payload jsonb NOT NULL,
         created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
         attempt_count integer NOT NULL DEFAULT 0,
         next_attempt_at timestamptz,
         sent_at timestamptz,
         leased_until timestamptz,
         lease_token uuid,
         last_error text,
         event_id uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
         headers jsonb%s
       ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
               autovacuum_vacuum_insert_scale_factor = 0.01)',
      v_schema, v_table,
      CASE WHEN v_col IS NULL THEN '' ELSE pg_catalog.format(', %I text NOT NULL', v_col) END);
    v_rel := pg_catalog.format('%I.%I', v_schema, v_table)::regclass;
    v_created := true;
  ELSE
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = v_rel) NOT IN ('r', 'p') THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but is not a table', v_name));
    END IF;
    -- Adopt: the columns the application already writes must be there with the right types.
    SELECT pg_catalog.string_agg(pg_catalog.format('%s %s', r.col, r.typ), ', ') INTO v_missing
    FROM (VALUES ('id', 'bigint'), ('event_type', 'text'), ('payload', 'jsonb'),
                 ('created_at', 'timestamp with time zone')) AS r(col, typ)
    WHERE NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = v_rel AND a.attname = r.col AND NOT a.attisdropped
        AND pg_catalog.format_type(a.atttypid, a.atttypmod) = r.typ);
    IF v_missing IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s exists but lacks required columns (or has other types): %s', v_name, v_missing));
    END IF;
    IF NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_index i
      WHERE i.indrelid = v_rel AND i.indisprimary AND i.indnatts = 1
        AND i.indkey[0] = (SELECT a.attnum FROM pg_catalog.pg_attribute a
                           WHERE a.attrelid = v_rel AND a.attname = 'id')) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but id is not its primary key', v_name));
    END IF;
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row.
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s
         ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
         ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
         ADD COLUMN IF NOT EXISTS sent_at timestamptz,
         ADD COLUMN IF NOT EXISTS leased_until timestamptz,
         ADD COLUMN IF NOT EXISTS lease_token uuid,
         ADD COLUMN IF NOT EXISTS last_error text,
         ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order.
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
        INTO STRICT v_has_nulls;
      IF v_has_nulls THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
      END IF;
      EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
    END IF;
  END IF;

  IF v_col IS NOT NULL THEN
    SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO v_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col;
  END IF;

  -- Renumbering late rows at commit (per-key commit order) takes new ids from this sequence.
  v_sequence := outbox._id_sequence(v_rel);
  IF v_col IS NOT NULL AND v_sequence IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is partitioned, so its id must come from an ascending sequence (identity, serial or '
      'DEFAULT nextval(''a_sequence'')): per-key commit order renumbers late rows with it', v_name));
  END IF;

  -- Everything derived from the old table goes before the new one is registered.
  IF v_old.queue_id IS NOT NULL AND v_new_table THEN
    DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_old.queue_id;
  END IF;

  -- clock_base: every id the sequence gave out so far counts as committed for per-key commit order
  -- (sessions with a cached sequence may still hand out smaller ones; their rows are then late).
  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0))
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence,
        clock_base = CASE WHEN q.table_oid = EXCLUDED.table_oid THEN q.clock_base ELSE EXCLUDED.clock_base END
  RETURNING q.queue_id INTO v_queue_id;

  -- The two required indexes, unless an equivalent one (any name) is already there.
  IF v_col IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'partition') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (%I, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_claim', v_rel);
  END IF;

  -- CHECKs, the producers' column privileges (plain INSERT of an event, RETURNING id; the heads
  -- trigger runs as owner) and the TRUNCATE trigger.
  PERFORM outbox._guard_queue_table(v_rel, v_col, NOT v_created);

  -- The NOTIFY trigger wakes drainers of an unpartitioned queue; a partitioned queue's rows become
  -- claimable at commit, where its commit step notifies (outbox._commit_partitions).
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
  IF v_col IS NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, v_channel, v_name);
  END IF;
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    -- A larger max_attempts makes rows that were poisoned deliverable again, possibly below their
    -- partitions' floors or in partitions without a head: they are searched from scratch too.
    IF v_new_table OR create_queue.max_attempts > v_old.max_attempts THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: gives poisoned rows (all of them, or the given ids) a fresh start: attempt_count 0,
-- due now, last_error kept for the record. Returns how many rows were requeued.
-- On a partitioned queue a requeued row goes to the TAIL of its key, as if committed now: it gets a
-- new id from the queue's sequence and is delivered after every row of its key committed before
-- the requeue, never before a successor that was already delivered (an old "register" must not
-- come back after the "unregister" that followed it without the operator asking for exactly that;
-- see docs/ordering.md). The rows then go through the producers' commit step (outbox._note_written):
-- order against concurrent producers, heads, NOTIFY. Their event is the same; only the position moves.
CREATE OR REPLACE FUNCTION outbox.requeue_poisoned(queue text, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'requeue_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
  v_old bigint[];
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  IF ids IS NOT NULL AND pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  IF v_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL, lease_token = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
      v_q.table_oid::regclass)
      USING v_q.max_attempts, ids;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
      PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
    END IF;
    RETURN v_count;
  END IF;

  IF v_q.id_sequence IS NULL THEN
    RAISE EXCEPTION '%: queue % has no id sequence to move requeued rows to the tail of their keys (call outbox.create_queue again)',
      fn, v_q.queue USING ERRCODE = '55000';
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
    v_q.table_oid::regclass)
    INTO v_old USING v_q.max_attempts, ids;
  IF v_old IS NULL THEN
    RETURN 0;
  END IF;
  -- New ids in the order of the old ones (generate_series yields in order, nextval runs per row).
  EXECUTE pg_catalog.format(
    'WITH moved AS (
       SELECT o.old_id, n.new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(old_id, i)
       JOIN (SELECT g.i, pg_catalog.nextval($3) AS new_id FROM pg_catalog.generate_series(1, $4) AS g(i)) n
         ON n.i = o.i),
     upd AS (
       UPDATE %1$s t SET id = m.new_id, attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                         lease_token = NULL, event_id = %3$s
       FROM moved m WHERE t.id = m.old_id AND t.sent_at IS NULL AND t.attempt_count >= $2
       RETURNING t.id, t.%2$I::text AS key)
     SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
            COALESCE(pg_catalog.sum(n), 0)
     FROM (SELECT upd.key AS k, pg_catalog.min(upd.id) AS lo, pg_catalog.max(upd.id) AS hi, pg_catalog.count(*) AS n
           FROM upd GROUP BY 1) s',
    v_q.table_oid::regclass, v_q.partition_column, outbox._event_id_of(v_q))
    INTO v_keys, v_mins, v_maxs, v_count USING v_old, v_q.max_attempts, v_q.id_sequence, pg_catalog.cardinality(v_old);
  IF v_keys IS NULL THEN
    RETURN 0;
  END IF;
  -- Each key's first and last moved row: what the commit step needs of them.
  PERFORM outbox._note_written(v_q.table_oid, v_keys || v_keys, v_mins || v_maxs);
  -- The commit step notifies only for heads it creates or wakes; a requeue is an operator asking
  -- for delivery now, so say so whatever the heads were.
  PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of an unpartitioned queue: one NOTIFY per statement
-- (PostgreSQL folds identical notifications of one transaction into one), never one per row. A
-- partitioned queue has none: its rows become claimable at commit, and its commit step
-- (outbox._commit_partitions) notifies only when it made or woke a partition head; rows behind an
-- existing head are claimed when the drainer that finishes the head claims again. NOTIFY takes a
-- cluster-wide lock at commit, so skipping it is what keeps many concurrent producers of busy keys
-- from queueing behind each other.
-- Arguments: channel, queue name (the payload).
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
AS $$
BEGIN
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
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
SET search_path = ''
SET enable_seqscan = off
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
  DELETE FROM outbox.commit_hooks h
  WHERE h.xid = pg_catalog.pg_current_xact_id_if_assigned() AND h.table_oid = TG_RELID;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE CONSTRAINT TRIGGER pgdrain_commit AFTER INSERT ON outbox.commit_hooks
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox.tg_queue__commit();

-- Registered partitioned queues get the new heads trigger, and lose the NOTIFY trigger: their
-- commit step sends the NOTIFY (only when a partition became claimable), the statement trigger was
-- only ever told to stay quiet.
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
DO $$
DECLARE
  v_table regclass;
BEGIN
  FOR v_table IN
    SELECT q.table_oid::regclass FROM outbox.queues q
    WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
    ORDER BY q.queue_id
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_table);
  END LOOP;
END;
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
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
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

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
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
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP FUNCTION outbox._commit_partitions(outbox.queues, outbox.commit_hooks);
DROP FUNCTION outbox._commit_keys(outbox.queues, text[], bigint[], bigint[], boolean);
DROP FUNCTION outbox._noted_keys(outbox.queues, outbox.commit_hooks);
DROP FUNCTION outbox._note_written(oid, text[], bigint[]);
DROP TABLE outbox.commit_hooks;
CREATE UNLOGGED TABLE outbox.commit_hooks (
  xid xid8 PRIMARY KEY DEFAULT pg_catalog.pg_current_xact_id()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
COMMENT ON TABLE outbox.commit_hooks IS
  'Producers'' open transactions, each queueing its commit step (internal; empty when idle).';
ALTER TABLE outbox.partition_clocks DROP COLUMN previous_max;
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
CREATE OR REPLACE FUNCTION outbox._claim(p_q outbox.queues, p_batch_size integer, p_lease interval, p_mode text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
  v_busy text[];
  v_front boolean;
  v_asked integer;
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

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now.
  IF pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys', true) <> ''
     OR pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_span', true) <> '' THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY(SELECT n.k FROM outbox._noted_keys(p_q, false) n));
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

  FOR pass IN 1..4 LOOP
    v_front := v_from_head IS NULL;
    v_asked := v_remaining;
    IF NOT v_front THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 AND h.attempt_count = 0 AND h.head_id > $2
                 AND h.head_id <> ALL ($3) AND h.partition_key <> ALL ($4)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $6
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_not_in_flight),
        'integer, bigint, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint)')
        INTO v_keys, v_heads, v_floors, v_last_fresh
        USING p_q.queue_id, v_from_head, v_all || v_held, v_seen, v_now, v_remaining;
      -- Too few past the cursor: the next pass goes on from the front; otherwise past these heads
      -- (a head in flight is not walked again by every pass).
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_remaining THEN
        v_from_head := NULL;
      ELSE
        v_from_head := v_last_fresh;
      END IF;
    ELSE
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0),
                pg_catalog.bool_and(s.attempt_count = 0)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
                 -- locks: without this a later pass would take them again.
                 AND (h.head_id IS NULL OR h.head_id <> ALL ($2))
                 AND h.partition_key <> ALL ($3)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $5
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', pg_catalog.replace(v_not_in_flight, '$5', '$4')),
        'integer, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint, pgdrain_only_fresh boolean)')
        INTO v_keys, v_heads, v_floors, v_last_fresh, v_only_fresh
        USING p_q.queue_id, v_all || v_held, v_seen, v_now, v_remaining;
      v_run_started := pg_catalog.date_part('epoch', v_now);
      -- As many fresh heads as asked for: the next pass goes on past them as from a cursor.
      IF v_only_fresh AND pg_catalog.cardinality(v_keys) = v_remaining THEN
        v_from_head := v_last_fresh;
      END IF;
    END IF;
    IF v_keys IS NULL THEN
      EXIT WHEN v_front;
      CONTINUE;
    END IF;
    IF v_last_fresh IS NOT NULL THEN
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started, false);
      IF v_front_duty AND v_front THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      END IF;
    END IF;

    -- Lease mode leases what it locks in the same statement (one statement planned, not two).
    v_until := pg_catalog.clock_timestamp() + p_lease;
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH picked AS (
         SELECT t.id, t.%2$I AS key
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS c(id, floor_id, key)
         -- A head must point at a row of its own partition (heads of new keys come from settings a
         -- producer could forge); one that does not is stale and refreshed below.
         JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%4$s
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           AND NOT EXISTS (SELECT 1 FROM %1$s p
                           WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                             AND p.sent_at IS NULL AND p.attempt_count < $2
                           OFFSET 0)
         FOR UPDATE OF t SKIP LOCKED),
       claimed AS (%5$s)
       SELECT pg_catalog.array_agg(claimed.id), pg_catalog.array_agg(claimed.key::text) FROM claimed',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type,
      CASE WHEN p_mode = 'lease'
           THEN pg_catalog.format(
             'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $6
              FROM picked WHERE u.id = picked.id RETURNING u.id, picked.key', v_table)
           ELSE 'SELECT picked.id, picked.key FROM picked' END),
      'bigint[], integer, bigint[], text[], timestamptz, timestamptz', 'TABLE(pgdrain_ids bigint[], pgdrain_keys text[])')
      INTO v_ids, v_claimed_keys USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now, v_until;

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
    END IF;

    -- Heads not claimed are in flight (their row is leased right now: nothing to refresh, their
    -- result moves them on, and an expired lease makes the row claimable again through the same
    -- head; this call looks at them no more) or stale: pointing at a row that is no longer (or not
    -- yet) the partition's deliverable head, refreshed here.
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k <> ALL (COALESCE(v_claimed_keys, '{}'));
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
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit):
-- makes per-key delivery order equal commit order, and gives new keys their partition head.
--
-- 1. Takes the commit lock of every key hash the transaction wrote (hashtext(key) & 65535), held
--    until the commit is complete: the hash's row of outbox.partition_clocks, locked FOR UPDATE in
--    hash order (made first, at the queue's clock_base, when the hash has none; made in hash order
--    too). A row lock, not an advisory one: a bulk transaction of 20,000 keys locks 20,000 rows
--    without filling the lock table, and producers of other hashes never wait for it. Commits that
--    share a hash are serialised from here on; only commit steps take these locks, all in one
--    order, so they can not deadlock.
-- 2. A key is late when a transaction that committed before us wrote a row of it (or of a key
--    with the same hash) with a larger id than our smallest: outbox.partition_clocks keeps
--    the largest committed id per hash, written only under these locks. A late key's rows of this
--    transaction get new ids from the id sequence, in their order, larger than every id already
--    given out: delivered order (id order) is then commit order. Not late (the usual case): no row
--    is written twice.
-- 3. Holds each existing head of its keys FOR KEY SHARE until the transaction ends, so that no claim
--    deletes it or raises its floor over our rows before they are visible (a claim takes FOR UPDATE,
--    and skips heads it can not lock, see outbox._refresh_heads); creates the heads of new keys,
--    wakes a head a claim left empty while we were open, and lowers a floor that lies above our
--    rows. It never waits for a claim: a head a claim holds (SKIP LOCKED) gets a wake note in
--    outbox.partition_wakes instead, which the next claim applies once that claim is over.
--    NOTIFY when a partition became claimable.
-- 4. Raises the clocks to our largest ids.
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
-- Heads are not locked there (a lock on a version newer than the snapshot fails with 40001 too,
-- and claims move heads all the time): every key with a head gets a wake note.
CREATE OR REPLACE FUNCTION outbox._commit_partitions(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_setting constant text := 'pgdrain.commit_' || p_q.table_oid;
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
  v_renumbered boolean := false;
  v_issued bigint;
  v_sequence constant regclass := p_q.id_sequence;
  v_any_late boolean;
  v_late_clocks bigint[];
  -- Per key, aligned with v_keys: what the commit step must do for it (see the probe below).
  v_states text[];
  v_new text[];
  v_fix text[];
  v_contended text[];
  -- Keys whose head another session made or took between our probe and our write.
  v_raced text[];
  v_raced_now text[];
  v_wrote boolean := false;
  v_slots integer[];
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  -- What the transaction's statements noted (outbox._note_written), merged per key.
  SELECT pg_catalog.array_agg(n.k ORDER BY n.k), pg_catalog.array_agg(n.lo ORDER BY n.k),
         pg_catalog.array_agg(n.hi ORDER BY n.k)
    INTO v_keys, v_mins, v_maxs
  FROM outbox._noted_keys(p_q, true) n;
  IF v_keys IS NULL THEN
    RETURN;
  END IF;

  v_slots := ARRAY(SELECT DISTINCT pg_catalog.hashtext(k) & 65535 FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1);
  INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max)
  SELECT p_q.queue_id, s.slot, p_q.clock_base FROM pg_catalog.unnest(v_slots) AS s(slot) ORDER BY s.slot
  ON CONFLICT (queue_id, slot) DO NOTHING;
  PERFORM 1 FROM (SELECT c.slot FROM outbox.partition_clocks c
                  WHERE c.queue_id = p_q.queue_id AND c.slot = ANY (v_slots)
                  ORDER BY c.slot FOR UPDATE) l;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of the clocks and the heads (LATERAL: index probes whatever the statistics
  -- of these small tables say). Late keys are renumbered, then probed again.
  LOOP
    SELECT pg_catalog.bool_or(c.committed_max > u.lo),
           pg_catalog.array_agg(CASE WHEN c.committed_max > u.lo THEN c.committed_max END ORDER BY u.k),
           pg_catalog.array_agg(s.state ORDER BY u.k),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'new'),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'fix'),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'contended')
      INTO v_any_late, v_late_clocks, v_states, v_new, v_fix, v_contended
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    -- Every hash has its clock now (a new one starts at the queue's clock_base: ids given out before
    -- the queue was (re)registered or truncated, which sessions with a cached sequence may still
    -- hand out).
    LEFT JOIN LATERAL (SELECT x.committed_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535) c ON true
    LEFT JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM outbox.partition_heads x
                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k) AS found) e ON true
    -- The head's latest version, held until we commit; none when a claim holds it (or, under
    -- REPEATABLE READ or SERIALIZABLE, always).
    LEFT JOIN LATERAL (SELECT true AS held, x.head_id, x.floor_id FROM outbox.partition_heads x
                       WHERE v_read_committed AND x.queue_id = p_q.queue_id AND x.partition_key = u.k
                       FOR KEY SHARE SKIP LOCKED) h ON true
    -- new: no head yet; fix: a head we hold that a claim left empty, or whose floor is above our
    -- rows; contended: a head a claim holds (a wake note).
    CROSS JOIN LATERAL (SELECT CASE WHEN NOT e.found THEN 'new'
                                    WHEN h.held AND (h.head_id IS NULL OR h.floor_id > u.lo) THEN 'fix'
                                    WHEN h.held IS NULL THEN 'contended' END AS state) s;
    EXIT WHEN NOT v_any_late OR v_renumbered;
    -- v_keys is in key order, and so are the clocks aggregated above and what comes back.
    SELECT pg_catalog.array_agg(r.k ORDER BY r.k), pg_catalog.array_agg(r.lo ORDER BY r.k),
           pg_catalog.array_agg(r.hi ORDER BY r.k)
      INTO v_keys, v_mins, v_maxs
    FROM outbox._renumber_late_rows(p_q, v_sequence, v_keys, v_mins, v_maxs, v_late_clocks) r;
    v_renumbered := true;
  END LOOP;

  -- New keys get their heads, a head a claim left empty while we were open is woken, and a floor
  -- above our rows (ids given explicitly, which are not renumbered) is lowered. A head another
  -- session holds or made meanwhile is left to a wake note. NOTIFY when anything was written: a
  -- partition became (or may have become) claimable.
  IF v_new IS NOT NULL THEN
    -- A new head's floor is our smallest id (poisoned rows before it are not walked again) only
    -- while the queue's heads are complete and no wake note waits for the key: after a crash "no
    -- head" may mean the heads were lost while older rows of the key are still pending, and a note
    -- means a producer before us committed rows of the key while a claim was deleting its head
    -- (the note is applied by a later claim, which a claim of our row must not overtake). Then the
    -- floor is 0 until a claim raises it.
    WITH made AS (
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo,
             CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                       AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                       WHERE w.queue_id = p_q.queue_id AND w.partition_key = u.k)
                  THEN u.lo ELSE 0 END
      -- Filtered on the aligned state, not with u.k = ANY (v_new): that compares every key with
      -- every new key (a 192,000-row bulk load of 32,000 new keys spent 9.6 s here).
      FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
      WHERE u.state = 'new'
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_raced_now FROM pg_catalog.unnest(v_new) AS k
    WHERE k NOT IN (SELECT made.partition_key FROM made);
    v_raced := v_raced || v_raced_now;
    v_wrote := true;
  END IF;
  IF v_fix IS NOT NULL THEN
    -- One locking probe per key (skipped when a claim took the head since), then the heads updated
    -- by ctid: linear in the keys.
    WITH locked AS (
      SELECT x.tid, u.lo FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
      CROSS JOIN LATERAL (SELECT h.ctid AS tid FROM outbox.partition_heads h
                          WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k
                          FOR NO KEY UPDATE SKIP LOCKED) x
      WHERE u.state = 'fix'),
    fixed AS (
      UPDATE outbox.partition_heads h
      SET head_id = COALESCE(h.head_id, l.lo),
          parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
          floor_id = LEAST(h.floor_id, l.lo)
      FROM locked l
      WHERE h.ctid = l.tid
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_raced_now
    FROM pg_catalog.unnest(v_fix) AS k
    WHERE k NOT IN (SELECT fixed.partition_key FROM fixed);
    v_raced := v_raced || v_raced_now;
    v_wrote := true;
  END IF;
  IF v_contended IS NOT NULL OR v_raced IS NOT NULL THEN
    -- The OR keeps the IN a hashed subplan (a semi-join here would be a nested loop: hash joins
    -- are off in this function).
    INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id)
    SELECT p_q.queue_id, u.k, u.lo FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
    WHERE u.state = 'contended' OR u.k IN (SELECT r.k FROM pg_catalog.unnest(v_raced) AS r(k));
    v_wrote := true;
  END IF;
  IF v_wrote THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;

  -- The keys and ids come from transaction-local settings, which a producer could forge: a clock
  -- is never raised above the last id the sequence gave out, so a forged one can not stop later
  -- commits from being renumbered.
  v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
  INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max)
  SELECT p_q.queue_id, pg_catalog.hashtext(u.k) & 65535, LEAST(pg_catalog.max(u.hi), v_issued)
  FROM unnest(v_keys, v_maxs) AS u(k, hi)
  GROUP BY 2 ORDER BY 2
  ON CONFLICT (queue_id, slot) DO UPDATE
    SET committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue its heads trigger: a statement-level AFTER INSERT trigger running a
-- function made for this queue, outbox.tg_queue__heads_q<queue_id>, whose query names the partition
-- column statically, so PL/pgSQL plans it once per session instead of on every statement (a generic
-- function would need a dynamic EXECUTE). It hands the statement's keys, with the smallest and
-- largest new id of each, to outbox._note_written. Made again by every create_queue, so it always
-- matches the registration (nothing else reinstalls it: run create_queue again if it was dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write what _note_written writes.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  v_function constant text := 'outbox.' || pg_catalog.quote_ident('tg_queue__heads_q' || p_q.queue_id);
BEGIN
  EXECUTE pg_catalog.format(
    $f$CREATE OR REPLACE FUNCTION %1$s()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = ''
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
DECLARE
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  SELECT pg_catalog.array_agg(s.k), pg_catalog.array_agg(s.lo), pg_catalog.array_agg(s.hi)
    INTO v_keys, v_mins, v_maxs
  FROM (SELECT n.%3$I::text AS k, pg_catalog.min(n.id) AS lo, pg_catalog.max(n.id) AS hi
        FROM pgdrain_new_rows n WHERE n.sent_at IS NULL GROUP BY 1 ORDER BY 1) s;
  IF v_keys IS NOT NULL THEN
    PERFORM outbox._note_written(TG_RELID, v_keys, v_mins, v_maxs);
  END IF;
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Notes rows this transaction wrote to a partitioned queue (a producer's INSERT, through its
-- generated heads trigger, or requeue_poisoned moving rows to the tail of their keys) for its
-- commit step: appends the keys with the smallest and largest id of each to transaction-local
-- settings (a rolled back savepoint takes its keys with it, like its rows) and, once per
-- transaction, queues the commit step (outbox.tg_queue__commit) by inserting a row into
-- outbox.commit_hooks. It takes no lock: a producer's INSERT never waits, and what protects its
-- uncommitted rows from a claim that finds their partition empty is the commit step's (see
-- outbox._commit_partitions and outbox._refresh_heads).
-- The settings are only appended to (text, no parsing): a transaction of many statements costs the
-- same per statement whatever it wrote before; the commit step merges repeated keys once.
CREATE OR REPLACE FUNCTION outbox._note_written(p_table oid, p_keys text[], p_mins bigint[], p_maxs bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_setting constant text := 'pgdrain.commit_' || p_table;
  v_keys constant text := pg_catalog.current_setting(v_setting || '_keys', true);
  v_queues text;
  v_span text;
BEGIN
  -- Rows that become claimable do so at commit, where the commit step sends the NOTIFY.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || p_table, 'on', true);

  -- Array literals are appended as text: '{a,b}' and '{c}' make '{a,b,c}'. Past 8 kB of keys (a
  -- transaction of many statements) only the span of ids is kept, "lo,hi", so a statement costs the
  -- same however many came before; the commit step then reads the keys from those rows.
  v_span := NULLIF(pg_catalog.current_setting(v_setting || '_span', true), '');
  IF v_span IS NULL AND pg_catalog.length(v_keys) > 8192 THEN
    SELECT pg_catalog.min(lo) || ',' || pg_catalog.max(hi) INTO v_span
    FROM unnest(pg_catalog.current_setting(v_setting || '_mins')::bigint[],
                pg_catalog.current_setting(v_setting || '_maxs')::bigint[]) AS u(lo, hi);
    PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
            pg_catalog.set_config(v_setting || '_mins', '', true),
            pg_catalog.set_config(v_setting || '_maxs', '', true);
  END IF;
  IF v_span IS NOT NULL THEN
    PERFORM pg_catalog.set_config(v_setting || '_span',
      LEAST(pg_catalog.split_part(v_span, ',', 1)::bigint, (SELECT pg_catalog.min(x) FROM pg_catalog.unnest(p_mins) x))
      || ',' ||
      GREATEST(pg_catalog.split_part(v_span, ',', 2)::bigint, (SELECT pg_catalog.max(x) FROM pg_catalog.unnest(p_maxs) x)),
      true);
  ELSIF v_keys IS NULL OR v_keys = '' THEN
    PERFORM pg_catalog.set_config(v_setting || '_keys', p_keys::text, true),
            pg_catalog.set_config(v_setting || '_mins', p_mins::text, true),
            pg_catalog.set_config(v_setting || '_maxs', p_maxs::text, true);
  ELSE
    PERFORM pg_catalog.set_config(v_setting || '_keys',
              pg_catalog.rtrim(v_keys, '}') || ',' || pg_catalog.ltrim(p_keys::text, '{'), true),
            pg_catalog.set_config(v_setting || '_mins',
              pg_catalog.rtrim(pg_catalog.current_setting(v_setting || '_mins'), '}') || ','
              || pg_catalog.ltrim(p_mins::text, '{'), true),
            pg_catalog.set_config(v_setting || '_maxs',
              pg_catalog.rtrim(pg_catalog.current_setting(v_setting || '_maxs'), '}') || ','
              || pg_catalog.ltrim(p_maxs::text, '{'), true);
  END IF;

  -- The first statement of the transaction queues the commit step: a row in outbox.commit_hooks,
  -- whose deferred constraint trigger fires at COMMIT. The pending trigger event is on that table,
  -- not on the queue table, so DDL and TRUNCATE of the queue in the same transaction still work.
  -- Armed before the insert: under SET CONSTRAINTS ... IMMEDIATE the hook's trigger fires at the end
  -- of that INSERT, runs the commit step for what is noted so far and disarms, so the next statement
  -- queues it again.
  IF pg_catalog.current_setting('pgdrain.commit_armed', true) IS DISTINCT FROM 'on' THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_armed', 'on', true);
    v_queues := COALESCE(NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), ''), '{}');
    IF NOT p_table::text = ANY (v_queues::text[]) THEN
      PERFORM pg_catalog.set_config('pgdrain.commit_queues', (v_queues::text[] || p_table::text)::text, true);
    END IF;
    INSERT INTO outbox.commit_hooks DEFAULT VALUES;
  ELSIF pg_catalog.strpos(pg_catalog.current_setting('pgdrain.commit_queues', true), p_table::text) = 0
     OR NOT p_table::text = ANY (pg_catalog.current_setting('pgdrain.commit_queues')::text[]) THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_queues',
      (pg_catalog.current_setting('pgdrain.commit_queues')::text[] || p_table::text)::text, true);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The keys this transaction wrote to a partitioned queue so far, each with its smallest and largest
-- id, in key order, as outbox._note_written noted them: from the transaction-local lists, or, for a
-- transaction of many statements, from this transaction's rows in the span of ids it noted
-- (p_forget: clear the notes, as the commit step does).
CREATE OR REPLACE FUNCTION outbox._noted_keys(p_q outbox.queues, p_forget boolean)
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
  v_setting constant text := 'pgdrain.commit_' || p_q.table_oid;
  v_span constant text := NULLIF(pg_catalog.current_setting(v_setting || '_span', true), '');
BEGIN
  IF v_span IS NULL THEN
    RETURN QUERY
      SELECT u.k, pg_catalog.min(u.lo), pg_catalog.max(u.hi)
      FROM unnest(NULLIF(pg_catalog.current_setting(v_setting || '_keys', true), '')::text[],
                  NULLIF(pg_catalog.current_setting(v_setting || '_mins', true), '')::bigint[],
                  NULLIF(pg_catalog.current_setting(v_setting || '_maxs', true), '')::bigint[]) AS u(k, lo, hi)
      GROUP BY u.k ORDER BY u.k;
  ELSE
    -- Rows of the top transaction are known by their xmin; only a savepoint's need the lookup.
    RETURN QUERY EXECUTE pg_catalog.format(
      'SELECT t.%I::text, pg_catalog.min(t.id), pg_catalog.max(t.id) FROM %s t
       WHERE t.id BETWEEN $1 AND $2 AND t.sent_at IS NULL AND (t.xmin = $3 OR outbox._written_here(t.xmin))
       GROUP BY 1 ORDER BY 1', p_q.partition_column, p_q.table_oid::regclass)
      USING pg_catalog.split_part(v_span, ',', 1)::bigint, pg_catalog.split_part(v_span, ',', 2)::bigint,
            (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
  IF p_forget THEN
    PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
            pg_catalog.set_config(v_setting || '_mins', '', true),
            pg_catalog.set_config(v_setting || '_maxs', '', true),
            pg_catalog.set_config(v_setting || '_span', '', true);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the NOTIFY trigger,
-- the TRUNCATE trigger and, for a partitioned queue, the trigger that feeds the commit step; then
-- registers the queue. Idempotent: calling it again with new settings updates them; the partition
-- column can not change. An adopted table keeps its rows; missing lease columns are added as
-- NULL = "free". What the table enforces on producers (CHECKs, column privileges) is
-- outbox._guard_queue_table.
-- Registration follows the table: when the registered table was dropped (or dropped and made
-- again) outside drop_queue, the new table is registered under the same queue_id and every piece
-- of state derived from the old one (partition heads, built-mark, clocks) is dropped first; heads
-- are then rebuilt from the new table's rows.
-- A partitioned queue needs the sequence its ids come from (outbox.queues.id_sequence): the commit
-- step renumbers late rows with it.
-- A created table gets fillfactor 50, so writing a lease is a HOT update (no index touched): a row
-- is written twice, leased and then sent, and the sent version (which leaves the partial indexes)
-- also takes room on the page; at 80, 10-23% of the updates of a drain were HOT (of 50% possible),
-- at 50 47-48%, with a fifth less WAL and a table no larger after its drain. And autovacuum
-- settings for a table that is mostly empty and churns.
CREATE OR REPLACE FUNCTION outbox.create_queue(
  queue text,
  partition_column text DEFAULT NULL,
  max_attempts integer DEFAULT 10,
  backoff_min interval DEFAULT '1 second',
  backoff_max interval DEFAULT '30 seconds',
  permanent_policy text DEFAULT 'poison',
  channel text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'create_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_schema text := pg_catalog.split_part(v_name, '.', 1);
  v_table text := pg_catalog.split_part(v_name, '.', 2);
  v_col text := pg_catalog.lower(partition_column);
  v_channel text := COALESCE(channel, 'pgdrain_' || v_schema || '_' || v_table);
  v_rel regclass;
  v_old outbox.queues;
  v_type text;
  v_queue_id integer;
  v_missing text;
  v_has_nulls boolean;
  v_sequence regclass;
  v_other text;
  v_new_table boolean;
  v_created boolean := false;
BEGIN
  IF partition_column IS NOT NULL AND partition_column !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must be a plain column name, got %L', partition_column));
  END IF;
  IF v_col IN ('id', 'event_type', 'payload', 'created_at', 'attempt_count', 'next_attempt_at',
               'sent_at', 'leased_until', 'lease_token', 'last_error') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_max IS NULL OR backoff_max < backoff_min OR backoff_max > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_max must be between backoff_min (%s) and 1 day, got %s',
      backoff_min, COALESCE(backoff_max::text, 'NULL')));
  END IF;
  IF permanent_policy IS NULL OR permanent_policy NOT IN ('poison', 'retry') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'permanent_policy must be ''poison'' or ''retry'', got %L', permanent_policy));
  END IF;
  IF permanent_policy = 'retry' AND v_col IS NOT NULL THEN
    PERFORM outbox._invalid(fn,
      'permanent_policy ''retry'' is not allowed with a partition_column: an event that can never '
      'apply would wedge its partition forever');
  END IF;
  IF v_channel !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'channel must be a plain name of at most 63 characters, got %L', v_channel));
  END IF;
  v_channel := pg_catalog.lower(v_channel);

  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = v_schema) THEN
    RAISE EXCEPTION '%: schema % does not exist', fn, v_schema USING ERRCODE = '3F000';
  END IF;
  v_rel := pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, v_table));

  -- The registration is this table's only while its oid is the table's; a registration whose
  -- table was dropped (and maybe made again) is stale, and the new table is a new queue.
  SELECT * INTO v_old FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF FOUND AND v_old.table_oid = v_rel AND v_old.partition_column IS DISTINCT FROM v_col THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column of registered queue %s is %s and can not change to %s (drop_queue first)',
      v_name, COALESCE(v_old.partition_column, 'NULL'), COALESCE(v_col, 'NULL')));
  END IF;
  IF v_rel IS NOT NULL THEN
    SELECT q.queue INTO v_other FROM outbox.queues q WHERE q.table_oid = v_rel AND q.queue <> v_name;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'table %s is already registered as queue %s (renamed?); drop_queue(%L) first', v_name, v_other, v_other));
    END IF;
  END IF;
  v_new_table := v_old.queue_id IS NULL OR v_old.table_oid IS DISTINCT FROM v_rel;

  IF v_rel IS NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TABLE %I.%I (
         id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
         event_type text NOT NULL,
         payload jsonb NOT NULL,
         created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
         attempt_count integer NOT NULL DEFAULT 0,
         next_attempt_at timestamptz,
         sent_at timestamptz,
         leased_until timestamptz,
         lease_token uuid,
         last_error text,
         event_id uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
         headers jsonb%s
       ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
               autovacuum_vacuum_insert_scale_factor = 0.01)',
      v_schema, v_table,
      CASE WHEN v_col IS NULL THEN '' ELSE pg_catalog.format(', %I text NOT NULL', v_col) END);
    v_rel := pg_catalog.format('%I.%I', v_schema, v_table)::regclass;
    v_created := true;
  ELSE
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = v_rel) NOT IN ('r', 'p') THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but is not a table', v_name));
    END IF;
    -- Adopt: the columns the application already writes must be there with the right types.
    SELECT pg_catalog.string_agg(pg_catalog.format('%s %s', r.col, r.typ), ', ') INTO v_missing
    FROM (VALUES ('id', 'bigint'), ('event_type', 'text'), ('payload', 'jsonb'),
                 ('created_at', 'timestamp with time zone')) AS r(col, typ)
    WHERE NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = v_rel AND a.attname = r.col AND NOT a.attisdropped
        AND pg_catalog.format_type(a.atttypid, a.atttypmod) = r.typ);
    IF v_missing IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s exists but lacks required columns (or has other types): %s', v_name, v_missing));
    END IF;
    IF NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_index i
      WHERE i.indrelid = v_rel AND i.indisprimary AND i.indnatts = 1
        AND i.indkey[0] = (SELECT a.attnum FROM pg_catalog.pg_attribute a
                           WHERE a.attrelid = v_rel AND a.attname = 'id')) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but id is not its primary key', v_name));
    END IF;
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row.
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s
         ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
         ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
         ADD COLUMN IF NOT EXISTS sent_at timestamptz,
         ADD COLUMN IF NOT EXISTS leased_until timestamptz,
         ADD COLUMN IF NOT EXISTS lease_token uuid,
         ADD COLUMN IF NOT EXISTS last_error text,
         ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order.
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
        INTO STRICT v_has_nulls;
      IF v_has_nulls THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
      END IF;
      EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
    END IF;
  END IF;

  IF v_col IS NOT NULL THEN
    SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO v_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col;
  END IF;

  -- Renumbering late rows at commit (per-key commit order) takes new ids from this sequence.
  v_sequence := outbox._id_sequence(v_rel);
  IF v_col IS NOT NULL AND v_sequence IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is partitioned, so its id must come from an ascending sequence (identity, serial or '
      'DEFAULT nextval(''a_sequence'')): per-key commit order renumbers late rows with it', v_name));
  END IF;

  -- Everything derived from the old table goes before the new one is registered.
  IF v_old.queue_id IS NOT NULL AND v_new_table THEN
    DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_old.queue_id;
  END IF;

  -- clock_base: every id the sequence gave out so far counts as committed for per-key commit order
  -- (sessions with a cached sequence may still hand out smaller ones; their rows are then late).
  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0))
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence,
        clock_base = CASE WHEN q.table_oid = EXCLUDED.table_oid THEN q.clock_base ELSE EXCLUDED.clock_base END
  RETURNING q.queue_id INTO v_queue_id;

  -- The two required indexes, unless an equivalent one (any name) is already there.
  IF v_col IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'partition') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (%I, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_claim', v_rel);
  END IF;

  -- CHECKs, the producers' column privileges (plain INSERT of an event, RETURNING id; the heads
  -- trigger runs as owner) and the TRUNCATE trigger.
  PERFORM outbox._guard_queue_table(v_rel, v_col, NOT v_created);

  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
       EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, v_channel, v_name);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    -- A larger max_attempts makes rows that were poisoned deliverable again, possibly below their
    -- partitions' floors or in partitions without a head: they are searched from scratch too.
    IF v_new_table OR create_queue.max_attempts > v_old.max_attempts THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: gives poisoned rows (all of them, or the given ids) a fresh start: attempt_count 0,
-- due now, last_error kept for the record. Returns how many rows were requeued.
-- On a partitioned queue a requeued row goes to the TAIL of its key, as if committed now: it gets a
-- new id from the queue's sequence and is delivered after every row of its key committed before
-- the requeue, never before a successor that was already delivered (an old "register" must not
-- come back after the "unregister" that followed it without the operator asking for exactly that;
-- see docs/ordering.md). The rows then go through the producers' commit step (outbox._note_written):
-- order against concurrent producers, heads, NOTIFY. Their event is the same; only the position moves.
CREATE OR REPLACE FUNCTION outbox.requeue_poisoned(queue text, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'requeue_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
  v_old bigint[];
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  IF ids IS NOT NULL AND pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  IF v_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL, lease_token = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
      v_q.table_oid::regclass)
      USING v_q.max_attempts, ids;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
      PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
    END IF;
    RETURN v_count;
  END IF;

  IF v_q.id_sequence IS NULL THEN
    RAISE EXCEPTION '%: queue % has no id sequence to move requeued rows to the tail of their keys (call outbox.create_queue again)',
      fn, v_q.queue USING ERRCODE = '55000';
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
    v_q.table_oid::regclass)
    INTO v_old USING v_q.max_attempts, ids;
  IF v_old IS NULL THEN
    RETURN 0;
  END IF;
  -- New ids in the order of the old ones (generate_series yields in order, nextval runs per row).
  EXECUTE pg_catalog.format(
    'WITH moved AS (
       SELECT o.old_id, n.new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(old_id, i)
       JOIN (SELECT g.i, pg_catalog.nextval($3) AS new_id FROM pg_catalog.generate_series(1, $4) AS g(i)) n
         ON n.i = o.i),
     upd AS (
       UPDATE %1$s t SET id = m.new_id, attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                         lease_token = NULL, event_id = %3$s
       FROM moved m WHERE t.id = m.old_id AND t.sent_at IS NULL AND t.attempt_count >= $2
       RETURNING t.id, t.%2$I::text AS key)
     SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
            COALESCE(pg_catalog.sum(n), 0)
     FROM (SELECT upd.key AS k, pg_catalog.min(upd.id) AS lo, pg_catalog.max(upd.id) AS hi, pg_catalog.count(*) AS n
           FROM upd GROUP BY 1) s',
    v_q.table_oid::regclass, v_q.partition_column, outbox._event_id_of(v_q))
    INTO v_keys, v_mins, v_maxs, v_count USING v_old, v_q.max_attempts, v_q.id_sequence, pg_catalog.cardinality(v_old);
  IF v_keys IS NULL THEN
    RETURN 0;
  END IF;
  PERFORM outbox._note_written(v_q.table_oid, v_keys, v_mins, v_maxs);
  -- The commit step notifies only for heads it creates or wakes; a requeue is an operator asking
  -- for delivery now, so say so whatever the heads were.
  PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), whose row outbox._note_written inserts once per transaction,
-- so it fires once, at COMMIT, after the transaction's last statement. It hands every partitioned
-- queue the transaction wrote to outbox._commit_partitions in queue_id order: the commit locks of
-- all transactions are then taken in one global order, and committing transactions never deadlock.
-- SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE runs it earlier (its locks are then held until
-- the transaction ends); rows written after that queue it again.
CREATE OR REPLACE FUNCTION outbox.tg_queue__commit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_queues text := NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), '');
  v_q outbox.queues;
BEGIN
  DELETE FROM outbox.commit_hooks h WHERE h.xid = pg_catalog.pg_current_xact_id();
  PERFORM pg_catalog.set_config('pgdrain.commit_armed', '', true),
          pg_catalog.set_config('pgdrain.commit_queues', '', true);
  IF v_queues IS NULL THEN
    RETURN NULL;
  END IF;
  FOR v_q IN
    SELECT * FROM outbox.queues q
    WHERE q.table_oid::text = ANY (v_queues::text[]) AND q.partition_column IS NOT NULL
      -- The transaction may have dropped the table it wrote: nothing of it is left to order.
      AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
    ORDER BY q.queue_id
  LOOP
    PERFORM outbox._commit_partitions(v_q);
  END LOOP;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger: one NOTIFY per statement (PostgreSQL folds identical
-- notifications of one transaction into one), never one per row. A partitioned queue stays quiet
-- here (pgdrain_heads fires first and says so): its rows become claimable at commit, and the commit
-- step (outbox._commit_partitions) notifies only when it made a new partition head; rows behind an
-- existing head are claimed when the drainer that finishes the head claims again. NOTIFY takes a
-- cluster-wide lock at commit, so skipping it is what keeps many concurrent producers of busy keys
-- from queueing behind each other.
-- Arguments: channel, queue name (the payload).
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
AS $$
BEGIN
  IF pg_catalog.current_setting('pgdrain.quiet_' || TG_RELID, true) = 'on' THEN
    RETURN NULL;
  END IF;
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER TRUNCATE trigger (pgdrain_truncate) of every queue table: the rows are
-- gone, so is everything derived from them. Deletes the queue's partition heads (they would point
-- at rows that no longer exist, with floors above the ids a RESTART IDENTITY hands out again) and
-- its clocks (they would make every later commit "late") and wake notes, and forgets the keys this transaction
-- noted for its commit step (their rows went with the TRUNCATE). The built-mark stays: an empty
-- table's heads are complete. TRUNCATE holds ACCESS EXCLUSIVE until the transaction ends, so no
-- producer or claim of the table is in flight; a rolled back TRUNCATE takes these deletes with it.
-- The queue is found by the table (TG_RELID), not by an argument, so re-registration never leaves
-- the trigger pointing elsewhere.
CREATE OR REPLACE FUNCTION outbox.tg_queue__truncate()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_setting constant text := 'pgdrain.commit_' || TG_RELID;
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
  IF pg_catalog.current_setting(v_setting || '_keys', true) <> ''
     OR pg_catalog.current_setting(v_setting || '_span', true) <> '' THEN
    PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
            pg_catalog.set_config(v_setting || '_mins', '', true),
            pg_catalog.set_config(v_setting || '_maxs', '', true),
            pg_catalog.set_config(v_setting || '_span', '', true);
  END IF;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE CONSTRAINT TRIGGER pgdrain_commit AFTER INSERT ON outbox.commit_hooks
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox.tg_queue__commit();
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
DO $$
DECLARE
  v_q outbox.queues;
BEGIN
  FOR v_q IN
    SELECT * FROM outbox.queues q
    WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
    ORDER BY q.queue_id
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_q.table_oid::regclass, v_q.channel, v_q.queue);
  END LOOP;
END;
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
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
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

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
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
-- +goose StatementEnd

