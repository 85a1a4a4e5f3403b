-- +goose Up
-- +goose StatementBegin
-- SERIALIZABLE producers note their rows in their hook (issue 14). Their commit step read their
-- notes and hook by index, and the page it read is the page the next producer's note and hook go
-- into: a predicate lock there is a read/write dependency on every producer that writes after it,
-- and three overlapping SERIALIZABLE producers of unrelated keys made a chain PostgreSQL cancels
-- (40001, "identification as a pivot": about 1 in 1,000 transactions at 4 clients). A
-- SERIALIZABLE transaction now keeps its keys and ids in its own row of outbox.commit_hooks,
-- which its commit step finds by the primary key's arbiter (no predicate lock) and deletes by ctid.
ALTER TABLE outbox.commit_hooks
  ADD COLUMN table_oids oid[],
  ADD COLUMN keys text[],
  ADD COLUMN ids bigint[];
COMMENT ON COLUMN outbox.commit_hooks.keys IS
  'SERIALIZABLE transactions only: the key and id of every row written, and its table (aligned); others note in outbox.commit_notes.';
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
  -- transaction (a test, a script) makes them now. A SERIALIZABLE transaction noted them in its
  -- hook (outbox._note_written).
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
--    NOTIFY when a partition became claimable (for a queue that notifies 'when_waiting', only while
--    a drainer waits: outbox._drainer_waits).
-- Returns whether it wrote a head or a wake note (and notified).
--
-- The usual transaction, no key late, costs two statements whatever its keys: the locks (the clocks
-- they return compared per hash with our smallest ids) and one probe per key of its head, which
-- keeps only the keys with something to do (none when every key has a head whose floor is below
-- our rows). A late transaction sorts its keys and probes them again after renumbering.
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
-- Heads are not locked there (a lock on a version newer than the snapshot fails with 40001 too,
-- and claims move heads all the time): every key with a head gets a wake note. A SERIALIZABLE
-- transaction whose keys are not late reads no head at all, and every key gets a wake note (see
-- the fast path): its commit step then takes no predicate lock on what other producers or claims
-- write (TestProducers_SerializableCommitStepTakesNoPredicateLockOthersWrite).
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
  v_probed boolean := false;
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
  v_serializable constant boolean := pg_catalog.current_setting('transaction_isolation') = 'serializable';
BEGIN
  v_keys := p_keys;
  v_mins := p_mins;
  v_maxs := p_maxs;
  IF NOT p_locked THEN
    -- The commit locks, and whether any key is late: a hash is late when the clock we found
    -- (previous_max) is above the smallest id we wrote of it. Compared per hash, in hash order
    -- (both sides sorted by slot, one row per slot each): no join, no sort of the keys.
    v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
    WITH noted AS (
      SELECT pg_catalog.hashtext(u.k) & 65535 AS slot, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
      FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
      GROUP BY 1),
    locked AS (
      INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
      SELECT p_q.queue_id, n.slot, GREATEST(p_q.clock_base, LEAST(n.hi, v_issued)), p_q.clock_base
      FROM noted n ORDER BY n.slot
      ON CONFLICT (queue_id, slot) DO UPDATE
        SET previous_max = c.committed_max,
            committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
      RETURNING c.slot, c.previous_max)
    SELECT EXISTS (SELECT 1 FROM unnest((SELECT pg_catalog.array_agg(l.previous_max ORDER BY l.slot) FROM locked l),
                                        (SELECT pg_catalog.array_agg(n.lo ORDER BY n.slot) FROM noted n)) AS x(clock, lo)
                   WHERE x.clock > x.lo)
      INTO v_any_late;
    IF v_any_late THEN
      SELECT pg_catalog.array_agg(n.k ORDER BY n.k), pg_catalog.array_agg(n.lo ORDER BY n.k),
             pg_catalog.array_agg(n.hi ORDER BY n.k)
        INTO v_keys, v_mins, v_maxs
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
            FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi) GROUP BY u.k) n;
    ELSIF v_serializable THEN
      -- SERIALIZABLE, no key late: every key gets a wake note (the next claim makes or fixes its
      -- head), without reading a head. A read takes a predicate lock on the index page other
      -- producers' new heads go into, and claims' updates of a head read here make a read/write
      -- dependency too: unrelated SERIALIZABLE producers failed with 40001 as a chain of them.
      SELECT pg_catalog.array_agg(u.k), pg_catalog.array_agg(u.lo), pg_catalog.array_agg('contended'::text),
             pg_catalog.array_agg(u.k)
        INTO v_keys, v_mins, v_states, v_contended
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo FROM unnest(v_keys, v_mins) AS u(k, lo) GROUP BY u.k) u;
      v_probed := true;
    ELSE
      -- No key is late (the usual case): one probe per key of its head, as in the loop below
      -- (see there), keeping only the keys with something to do (none, for keys whose heads are
      -- fine).
      SELECT pg_catalog.array_agg(u.k) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(u.lo) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(s.state) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'new'),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'fix'),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'contended')
        INTO v_keys, v_mins, v_states, v_new, v_fix, v_contended
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo FROM unnest(v_keys, v_mins) AS u(k, lo) GROUP BY u.k) u
      LEFT JOIN LATERAL (SELECT true AS held, x.head_id, x.floor_id FROM outbox.partition_heads x
                         WHERE v_read_committed AND x.queue_id = p_q.queue_id AND x.partition_key = u.k
                         FOR KEY SHARE SKIP LOCKED) h ON true
      CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                      WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                        THEN 'new'
                                      ELSE 'contended' END AS state
                          OFFSET 0) s;
      v_probed := true;
    END IF;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of its clock as we found it and of its head (LATERAL: index probes whatever
  -- the statistics of these small tables say). Late keys are renumbered, then probed again.
  WHILE NOT v_probed LOOP
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
    -- OFFSET 0 keeps the state a column computed once per key: pulled up, every aggregate that
    -- reads it ran its own probe of the heads (seven per new key).
    CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                    WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                     WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                      THEN 'new'
                                    ELSE 'contended' END AS state
                        OFFSET 0) s;
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
    -- floor is 0 until a claim raises it. So it is under REPEATABLE READ and SERIALIZABLE: their
    -- snapshot may miss a note, and not reading the notes keeps a SERIALIZABLE producer's predicate
    -- locks off the page other producers' wake notes go to (two producers that each made a new head
    -- and a wake note failed as a read/write cycle).
    WITH made AS (
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo,
             CASE WHEN v_read_committed
                       AND EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
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
  IF v_wrote AND outbox._drainer_waits(p_q) THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN v_wrote;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit
-- with the key and id of every row the transaction noted in the queue, see outbox._note_written,
-- aligned, a key may repeat): the keys it wrote go to
-- outbox._commit_keys, which makes per-key delivery order equal commit order and gives new keys
-- their partition head. The usual transactions, one row of a key that has a head or of a new key,
-- not late, are done here in two or three scalar statements: every statement of the commit step is an executor start
-- on the producer's write path (aggregates and CTEs, which the general step needs, cost the most
-- to start), and so is every planner setting a function pins.
-- Returns whether it wrote a head or a wake note (and notified).
CREATE OR REPLACE FUNCTION outbox._commit_partitions(p_q outbox.queues, p_keys text[], p_ids bigint[])
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
BEGIN
  -- SERIALIZABLE: outbox._commit_keys, which reads nothing other producers write.
  IF pg_catalog.cardinality(p_keys) = 1 AND pg_catalog.current_setting('transaction_isolation') <> 'serializable' THEN
    -- The commit lock of the key's hash, taken and the clock raised as outbox._commit_keys does.
    v_key := p_keys[1];
    v_id := p_ids[1];
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
      -- A new key (the other usual case): its head, made as outbox._commit_keys makes it. A head
      -- that exists (a claim holds it, or it needs a fix) is left to outbox._commit_keys.
      IF NOT FOUND THEN
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        SELECT p_q.queue_id, v_key, v_id,
               CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                         AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                         WHERE w.queue_id = p_q.queue_id AND w.partition_key = v_key)
                    THEN v_id ELSE 0 END
        ON CONFLICT (queue_id, partition_key) DO NOTHING;
        IF FOUND THEN
          IF outbox._drainer_waits(p_q) THEN
            PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
          END IF;
          RETURN true;
        END IF;
      END IF;
    END IF;
    RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, true);
  END IF;

  RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, false);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue its heads trigger: a statement-level AFTER INSERT trigger running a
-- function made for this queue, outbox.tg_queue__heads_q<queue_id>, whose one statement names the
-- partition column statically, so PL/pgSQL plans it once per session instead of on every
-- statement (a generic function would need a dynamic EXECUTE). It notes the key and id of each new
-- row for the commit step, as outbox._note_written does (inlined: one function call less on every
-- producer statement), except in a SERIALIZABLE transaction, which
-- calls it. Made again by every create_queue, so it always matches the registration
-- (nothing else reinstalls it: run create_queue again if it was dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write the notes.
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
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- Noted in the hook, see outbox._note_written.
    PERFORM outbox._note_written(TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id))
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
    RETURN NULL;
  END IF;
  WITH hook AS (
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (pg_catalog.pg_current_xact_id())
    ON CONFLICT (xid) DO NOTHING)
  INSERT INTO outbox.commit_notes (table_oid, keys, ids)
  SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.count(*) > 0;
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
-- outbox._install_heads_trigger) for its commit step: one row of outbox.commit_notes per statement,
-- inserted and never updated, so a statement costs the same however many came before it. The
-- transaction's row of outbox.commit_hooks, inserted by its first note only, queues the commit step
-- (outbox.tg_queue__commit) at COMMIT. A rolled back savepoint takes its notes with it, like its
-- rows (and its hook: a later note inserts it again). It takes no lock a producer could wait for:
-- what protects its uncommitted rows from a claim that finds their partition empty is the commit
-- step's (see outbox._commit_partitions and outbox._refresh_heads). Nothing else writes these
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
SET search_path = ''
AS $$
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
  WITH hook AS (
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (pg_catalog.pg_current_xact_id())
    ON CONFLICT (xid) DO NOTHING)
  INSERT INTO outbox.commit_notes (table_oid, keys, ids)
  SELECT p_table, p_keys, p_ids
  WHERE pg_catalog.cardinality(p_ids) > 0;
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
SET search_path = ''
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
       WHERE keys.k IS NOT NULL AND NOT n.noted) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_now
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
          -- A SERIALIZABLE transaction notes in its hook, one entry per row (outbox._note_written).
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
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), queued by the first note of a transaction (see
-- outbox._note_written and the generated heads triggers), fires at COMMIT. It takes every note of
-- the transaction and hands each partitioned queue's keys and ids to outbox._commit_partitions in
-- queue_id order: the commit locks of all transactions are taken in one global order, and
-- committing transactions never deadlock.
-- SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE runs it earlier (its locks are then held until
-- the transaction ends); rows written after that are noted, and queue it, again.
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
BEGIN
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
    DELETE FROM outbox.commit_hooks h WHERE h.xid = NEW.xid;
    -- The whole row (RETURNING n), not its columns: an array of the CTE's own row type would be
    -- converted to outbox.commit_notes[] through text, element by element (about 3 µs a commit).
    WITH taken AS (DELETE FROM outbox.commit_notes n WHERE n.xid = NEW.xid RETURNING n)
    SELECT pg_catalog.array_agg(t.n) INTO v_notes FROM taken t;
    -- One statement (the usual transaction): its queue, and its keys and ids as noted.
    -- The transaction may have dropped a table it wrote: nothing of it is left to order.
    IF pg_catalog.cardinality(v_notes) = 1 THEN
      SELECT * INTO v_q FROM outbox.queues q
      WHERE q.table_oid = v_notes[1].table_oid AND q.partition_column IS NOT NULL
        AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL;
      IF FOUND THEN
        v_notified := outbox._commit_partitions(v_q, v_notes[1].keys, v_notes[1].ids);
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
  DELETE FROM outbox.commit_notes n
  WHERE n.xid = pg_catalog.pg_current_xact_id_if_assigned() AND n.table_oid = TG_RELID;
  -- A SERIALIZABLE transaction's notes are in its hook (outbox._note_written).
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
-- Registered partitioned queues get the heads trigger whose SERIALIZABLE branch notes in the hook.
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
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
ALTER FUNCTION outbox.drainer_waits(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_woke(text, bigint) SECURITY DEFINER;

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

-- Workers say when they wait for a NOTIFY of a queue that notifies 'when_waiting' (outbox.set_notify,
-- which like create_queue is granted to nobody).
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint)
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
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
ALTER TABLE outbox.commit_hooks DROP COLUMN table_oids, DROP COLUMN keys, DROP COLUMN ids;
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
  IF EXISTS (SELECT 1 FROM outbox.commit_notes n
             WHERE n.xid = pg_catalog.pg_current_xact_id_if_assigned() AND n.table_oid = p_q.table_oid) THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY(
      SELECT DISTINCT u.k FROM outbox.commit_notes n CROSS JOIN LATERAL pg_catalog.unnest(n.keys) AS u(k)
      WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = p_q.table_oid));
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
--    NOTIFY when a partition became claimable (for a queue that notifies 'when_waiting', only while
--    a drainer waits: outbox._drainer_waits).
-- Returns whether it wrote a head or a wake note (and notified).
--
-- The usual transaction, no key late, costs two statements whatever its keys: the locks (the clocks
-- they return compared per hash with our smallest ids) and one probe per key of its head, which
-- keeps only the keys with something to do (none when every key has a head whose floor is below
-- our rows). A late transaction sorts its keys and probes them again after renumbering.
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
  v_probed boolean := false;
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  v_keys := p_keys;
  v_mins := p_mins;
  v_maxs := p_maxs;
  IF NOT p_locked THEN
    -- The commit locks, and whether any key is late: a hash is late when the clock we found
    -- (previous_max) is above the smallest id we wrote of it. Compared per hash, in hash order
    -- (both sides sorted by slot, one row per slot each): no join, no sort of the keys.
    v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
    WITH noted AS (
      SELECT pg_catalog.hashtext(u.k) & 65535 AS slot, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
      FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
      GROUP BY 1),
    locked AS (
      INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
      SELECT p_q.queue_id, n.slot, GREATEST(p_q.clock_base, LEAST(n.hi, v_issued)), p_q.clock_base
      FROM noted n ORDER BY n.slot
      ON CONFLICT (queue_id, slot) DO UPDATE
        SET previous_max = c.committed_max,
            committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
      RETURNING c.slot, c.previous_max)
    SELECT EXISTS (SELECT 1 FROM unnest((SELECT pg_catalog.array_agg(l.previous_max ORDER BY l.slot) FROM locked l),
                                        (SELECT pg_catalog.array_agg(n.lo ORDER BY n.slot) FROM noted n)) AS x(clock, lo)
                   WHERE x.clock > x.lo)
      INTO v_any_late;
    IF v_any_late THEN
      SELECT pg_catalog.array_agg(n.k ORDER BY n.k), pg_catalog.array_agg(n.lo ORDER BY n.k),
             pg_catalog.array_agg(n.hi ORDER BY n.k)
        INTO v_keys, v_mins, v_maxs
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
            FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi) GROUP BY u.k) n;
    ELSE
      -- No key is late (the usual case): one probe per key of its head, as in the loop below
      -- (see there), keeping only the keys with something to do (none, for keys whose heads are
      -- fine).
      SELECT pg_catalog.array_agg(u.k) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(u.lo) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(s.state) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'new'),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'fix'),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'contended')
        INTO v_keys, v_mins, v_states, v_new, v_fix, v_contended
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo FROM unnest(v_keys, v_mins) AS u(k, lo) GROUP BY u.k) u
      LEFT JOIN LATERAL (SELECT true AS held, x.head_id, x.floor_id FROM outbox.partition_heads x
                         WHERE v_read_committed AND x.queue_id = p_q.queue_id AND x.partition_key = u.k
                         FOR KEY SHARE SKIP LOCKED) h ON true
      CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                      WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                        THEN 'new'
                                      ELSE 'contended' END AS state
                          OFFSET 0) s;
      v_probed := true;
    END IF;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of its clock as we found it and of its head (LATERAL: index probes whatever
  -- the statistics of these small tables say). Late keys are renumbered, then probed again.
  WHILE NOT v_probed LOOP
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
    -- OFFSET 0 keeps the state a column computed once per key: pulled up, every aggregate that
    -- reads it ran its own probe of the heads (seven per new key).
    CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                    WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                     WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                      THEN 'new'
                                    ELSE 'contended' END AS state
                        OFFSET 0) s;
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
    -- floor is 0 until a claim raises it. So it is under REPEATABLE READ and SERIALIZABLE: their
    -- snapshot may miss a note, and not reading the notes keeps a SERIALIZABLE producer's predicate
    -- locks off the page other producers' wake notes go to (two producers that each made a new head
    -- and a wake note failed as a read/write cycle).
    WITH made AS (
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo,
             CASE WHEN v_read_committed
                       AND EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
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
  IF v_wrote AND outbox._drainer_waits(p_q) THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN v_wrote;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit
-- with the key and id of every row the transaction noted in the queue, see outbox._note_written,
-- aligned, a key may repeat): the keys it wrote go to
-- outbox._commit_keys, which makes per-key delivery order equal commit order and gives new keys
-- their partition head. The usual transactions, one row of a key that has a head or of a new key,
-- not late, are done here in two or three scalar statements: every statement of the commit step is an executor start
-- on the producer's write path (aggregates and CTEs, which the general step needs, cost the most
-- to start), and so is every planner setting a function pins.
-- Returns whether it wrote a head or a wake note (and notified).
CREATE OR REPLACE FUNCTION outbox._commit_partitions(p_q outbox.queues, p_keys text[], p_ids bigint[])
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
BEGIN
  IF pg_catalog.cardinality(p_keys) = 1 THEN
    -- The commit lock of the key's hash, taken and the clock raised as outbox._commit_keys does.
    v_key := p_keys[1];
    v_id := p_ids[1];
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
      -- A new key (the other usual case): its head, made as outbox._commit_keys makes it. A head
      -- that exists (a claim holds it, or it needs a fix) is left to outbox._commit_keys.
      IF NOT FOUND THEN
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        SELECT p_q.queue_id, v_key, v_id,
               CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                         AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                         WHERE w.queue_id = p_q.queue_id AND w.partition_key = v_key)
                    THEN v_id ELSE 0 END
        ON CONFLICT (queue_id, partition_key) DO NOTHING;
        IF FOUND THEN
          IF outbox._drainer_waits(p_q) THEN
            PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
          END IF;
          RETURN true;
        END IF;
      END IF;
    END IF;
    RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, true);
  END IF;

  RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, false);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue its heads trigger: a statement-level AFTER INSERT trigger running a
-- function made for this queue, outbox.tg_queue__heads_q<queue_id>, whose one statement names the
-- partition column statically, so PL/pgSQL plans it once per session instead of on every
-- statement (a generic function would need a dynamic EXECUTE). It notes the key and id of each new
-- row for the commit step, as outbox._note_written does (inlined: one function call less on every
-- producer statement). Made again by every create_queue, so it always matches the registration
-- (nothing else reinstalls it: run create_queue again if it was dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write the notes.
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
  WITH hook AS (
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (pg_catalog.pg_current_xact_id())
    ON CONFLICT (xid) DO NOTHING)
  INSERT INTO outbox.commit_notes (table_oid, keys, ids)
  SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.count(*) > 0;
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
-- outbox._install_heads_trigger) for its commit step: one row of outbox.commit_notes per statement,
-- inserted and never updated, so a statement costs the same however many came before it. The
-- transaction's row of outbox.commit_hooks, inserted by its first note only, queues the commit step
-- (outbox.tg_queue__commit) at COMMIT. A rolled back savepoint takes its notes with it, like its
-- rows (and its hook: a later note inserts it again). It takes no lock a producer could wait for:
-- what protects its uncommitted rows from a claim that finds their partition empty is the commit
-- step's (see outbox._commit_partitions and outbox._refresh_heads). Nothing else writes these
-- tables, so a producer can not forge a note.
-- Arguments: the queue table, and its rows' keys and ids (aligned).
CREATE OR REPLACE FUNCTION outbox._note_written(p_table oid, p_keys text[], p_ids bigint[])
RETURNS void
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  WITH hook AS (
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (pg_catalog.pg_current_xact_id())
    ON CONFLICT (xid) DO NOTHING)
  INSERT INTO outbox.commit_notes (table_oid, keys, ids)
  SELECT p_table, p_keys, p_ids
  WHERE pg_catalog.cardinality(p_ids) > 0;
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
--                    (pgdrain_commit disabled): its notes in outbox.commit_notes are deleted.
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
SET search_path = ''
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
       WHERE keys.k IS NOT NULL AND NOT n.noted) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_now
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
    SELECT n.xid, pg_catalog.count(*) AS notes
    FROM outbox.commit_notes n
    WHERE n.table_oid = v_q.table_oid
      AND pg_catalog.pg_xact_status(n.xid) IS DISTINCT FROM 'in progress'
    GROUP BY n.xid
    ORDER BY n.xid
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
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), queued by the first note of a transaction (see
-- outbox._note_written and the generated heads triggers), fires at COMMIT. It takes every note of
-- the transaction and hands each partitioned queue's keys and ids to outbox._commit_partitions in
-- queue_id order: the commit locks of all transactions are taken in one global order, and
-- committing transactions never deadlock.
-- SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE runs it earlier (its locks are then held until
-- the transaction ends); rows written after that are noted, and queue it, again.
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
BEGIN
  DELETE FROM outbox.commit_hooks h WHERE h.xid = NEW.xid;
  WITH taken AS (DELETE FROM outbox.commit_notes n WHERE n.xid = NEW.xid RETURNING n.*)
  SELECT pg_catalog.array_agg(t) INTO v_notes FROM taken t;
  -- The transaction may have dropped a table it wrote: nothing of it is left to order.
  IF pg_catalog.cardinality(v_notes) = 1 THEN
    SELECT * INTO v_q FROM outbox.queues q
    WHERE q.table_oid = v_notes[1].table_oid AND q.partition_column IS NOT NULL
      AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL;
    IF FOUND THEN
      v_notified := outbox._commit_partitions(v_q, v_notes[1].keys, v_notes[1].ids);
    END IF;
  ELSIF v_notes IS NOT NULL THEN
    -- Many statements, maybe several queues: each queue's keys and ids, merged.
    FOR v_merged IN
      SELECT q, m.keys, m.ids
      FROM (SELECT n.table_oid, pg_catalog.array_agg(u.k) AS keys, pg_catalog.array_agg(u.id) AS ids
            FROM pg_catalog.unnest(v_notes) n CROSS JOIN LATERAL unnest(n.keys, n.ids) AS u(k, id)
            GROUP BY n.table_oid) m
      JOIN outbox.queues q ON q.table_oid = m.table_oid
      WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
      ORDER BY q.queue_id
    LOOP
      v_notified := outbox._commit_partitions(v_merged.q, v_merged.keys, v_merged.ids);
    END LOOP;
  END IF;
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
  DELETE FROM outbox.commit_notes n
  WHERE n.xid = pg_catalog.pg_current_xact_id_if_assigned() AND n.table_oid = TG_RELID;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The heads triggers as they were.
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
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
ALTER FUNCTION outbox.drainer_waits(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_woke(text, bigint) SECURITY DEFINER;

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

-- Workers say when they wait for a NOTIFY of a queue that notifies 'when_waiting' (outbox.set_notify,
-- which like create_queue is granted to nobody).
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint)
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
-- +goose StatementEnd

