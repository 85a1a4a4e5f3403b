-- Commit step of one partitioned queue for the current transaction (called by
-- outbox.tg_queue__commit with the keys it wrote and their ids, repeats allowed; p_locked: the
-- commit locks of their hashes are taken, step 1 is done): makes per-key delivery order equal
-- commit order, and gives new keys their partition head.
--
-- 1. Takes the commit lock of every key hash the transaction wrote (hashtext(key) & 65535), held
--    until the commit is complete: the hash's row of outbox.partition_clocks, made or locked in
--    hash order by one INSERT ... ON CONFLICT DO UPDATE. Under REPEATABLE READ and SERIALIZABLE it
--    also raises the clock to our largest id and keeps the value it found in previous_max; under
--    READ COMMITTED it only locks the rows (its WHERE keeps it from updating them: no row version
--    per commit for a held xmin to keep), unless such a producer of the queue may be open
--    (outbox._snapshot_producers_open). A row lock, not an advisory one: a bulk transaction of
--    20,000 keys locks 20,000 rows without filling the lock table, and producers of other hashes
--    never wait for it. Commits that share a hash are serialised from here on; only commit steps
--    take these locks, all in one order, so they can not deadlock.
-- 2. A key is late when a transaction that committed before us wrote a row of it with a larger id
--    than our smallest. READ COMMITTED asks the queue table, after the locks and before the heads
--    (outbox._late_rows); REPEATABLE READ and SERIALIZABLE compare the clock of its hash (with a
--    sequence that caches ids, every key is late: see v_cached). A late key's rows of this
--    transaction get new ids from the id sequence, in their order, larger than every id already
--    given out: delivered order (id order) is then commit order, and written clocks follow them.
--    Not late (the usual case): no row is written twice.
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
-- The usual transaction, no key late, costs the locks, the lateness question (READ COMMITTED: one
-- statement, none when every id given out since our first is ours) and one probe per key of its
-- head, which keeps only the keys with something to do (none when every key has a head whose floor is below
-- our rows), whatever its keys. A late transaction sorts its keys and probes them again after
-- renumbering.
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
SET search_path = pg_catalog, pg_temp
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
  -- READ COMMITTED: per key (aligned with v_keys), the largest id another transaction committed
  -- above our smallest (outbox._late_rows), NULL when not late.
  v_late bigint[];
  v_late_asked boolean := false;
  -- Whether our commit locks raise the clocks: always in REPEATABLE READ and SERIALIZABLE, which
  -- read them to know they are late; in READ COMMITTED only while such a producer may be open.
  v_write_clock boolean := NOT v_read_committed;
  -- REPEATABLE READ or SERIALIZABLE with a sequence whose sessions cache ids: every key is late,
  -- past every id given out when the locks were taken (v_issued_locked).
  v_cached boolean := false;
  v_issued_locked bigint;
BEGIN
  v_keys := p_keys;
  v_mins := p_mins;
  v_maxs := p_maxs;
  IF NOT v_read_committed THEN
    -- A session's cached ids may lie below ids a READ COMMITTED producer committed without writing
    -- a clock before we announced ourselves (outbox._snapshot_producers_open); we can not see them.
    SELECT s.seqcache > 1 INTO v_cached FROM pg_catalog.pg_sequence s WHERE s.seqrelid = v_sequence;
    v_cached := COALESCE(v_cached, false);
  END IF;
  IF NOT p_locked THEN
    -- The commit locks: a hash's clock row, raised only when v_write_clock (else locked, no new
    -- version: ON CONFLICT DO UPDATE locks the rows its WHERE keeps from updating). Under REPEATABLE
    -- READ or SERIALIZABLE, whether any key is late: a hash is late when the clock we found
    -- (previous_max) is above the smallest id we wrote of it. Compared per hash, in hash order
    -- (both sides sorted by slot, one row per slot each): no join, no sort of the keys.
    IF v_read_committed THEN
      v_write_clock := outbox._snapshot_producers_open(p_q.queue_id);
    END IF;
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
        WHERE v_write_clock
      RETURNING c.slot, c.previous_max)
    SELECT NOT v_read_committed
           AND (v_cached
                OR EXISTS (SELECT 1 FROM unnest((SELECT pg_catalog.array_agg(l.previous_max ORDER BY l.slot) FROM locked l),
                                                (SELECT pg_catalog.array_agg(n.lo ORDER BY n.slot) FROM noted n)) AS x(clock, lo)
                           WHERE x.clock > x.lo))
      INTO v_any_late;
    IF v_read_committed THEN
      -- A new statement: its snapshot sees every commit that released these locks. Asked before
      -- the heads are read (see outbox.tg_queue__commit), and once: the loop below reuses it.
      v_late := outbox._late_rows(p_q, v_keys, v_mins, v_maxs);
      v_late_asked := true;
      v_any_late := EXISTS (SELECT 1 FROM unnest(v_late) AS l(id) WHERE l.id IS NOT NULL);
    END IF;
    IF v_any_late THEN
      -- A key's answer is the same wherever it repeats (READ COMMITTED; NULL otherwise).
      SELECT pg_catalog.array_agg(n.k ORDER BY n.k), pg_catalog.array_agg(n.lo ORDER BY n.k),
             pg_catalog.array_agg(n.hi ORDER BY n.k), pg_catalog.array_agg(n.late ORDER BY n.k)
        INTO v_keys, v_mins, v_maxs, v_late
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi, pg_catalog.max(u.late) AS late
            FROM unnest(v_keys, v_mins, v_maxs, v_late) AS u(k, lo, hi, late) GROUP BY u.k) n;
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
  IF v_cached THEN
    v_issued_locked := pg_catalog.pg_sequence_last_value(v_sequence);
  END IF;
  WHILE NOT v_probed LOOP
    -- READ COMMITTED: whether a key is late, from the queue table (a statement of its own, after
    -- the locks), unless asked above; not again once renumbered.
    IF NOT v_read_committed OR v_renumbered THEN
      v_late := NULL;
    ELSIF NOT v_late_asked THEN
      v_late := outbox._late_rows(p_q, v_keys, v_mins, v_maxs);
    END IF;
    SELECT pg_catalog.bool_or(l.clock IS NOT NULL),
           pg_catalog.array_agg(l.clock ORDER BY u.k),
           pg_catalog.array_agg(s.state ORDER BY u.k),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'new'),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'fix'),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'contended')
      INTO v_any_late, v_late_clocks, v_states, v_new, v_fix, v_contended
    FROM unnest(v_keys, v_mins, v_maxs, v_late) AS u(k, lo, hi, late)
    -- REPEATABLE READ and SERIALIZABLE: the clock as our lock found it.
    LEFT JOIN LATERAL (SELECT x.previous_max FROM outbox.partition_clocks x
                       WHERE NOT v_read_committed
                         AND x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535) c ON true
    -- What the key's rows must be renumbered past, NULL when not late.
    CROSS JOIN LATERAL (SELECT CASE WHEN v_read_committed THEN u.late
                                    WHEN v_cached THEN v_issued_locked
                                    WHEN c.previous_max > u.lo THEN c.previous_max END AS clock) l
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
    -- The late keys' rows now end above every clock: their clocks follow, when clocks are written.
    -- READ COMMITTED asks again, now that its new ids are taken: a REPEATABLE READ or SERIALIZABLE
    -- producer that announced itself since the first time may hold ids below them, and will commit
    -- after us (outbox._snapshot_producers_open).
    IF v_read_committed THEN
      v_write_clock := outbox._snapshot_producers_open(p_q.queue_id);
    END IF;
    IF v_write_clock THEN
      v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
      UPDATE outbox.partition_clocks c
      SET committed_max = GREATEST(c.committed_max, LEAST(r.hi, v_issued))
      FROM (SELECT pg_catalog.hashtext(u.k) & 65535 AS slot, pg_catalog.max(u.hi) AS hi
            FROM unnest(v_keys, v_maxs, v_late_clocks) AS u(k, hi, clock)
            WHERE u.clock IS NOT NULL GROUP BY 1) r
      WHERE c.queue_id = p_q.queue_id AND c.slot = r.slot;
    END IF;
  END LOOP;

  -- New keys get their heads, a head a claim left empty while we were open is woken, and a floor
  -- above our rows (ids given explicitly, which are not renumbered) is lowered. A head another
  -- session holds or made meanwhile is left to a wake note. NOTIFY when anything was written: a
  -- partition became (or may have become) claimable.
  IF v_new IS NOT NULL THEN
    -- Never waits for a claim's open transaction making the same head (outbox._make_heads): the
    -- keys it did not make get wake notes.
    v_raced := v_raced || outbox._make_heads(p_q, v_keys, v_mins, v_states);
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
