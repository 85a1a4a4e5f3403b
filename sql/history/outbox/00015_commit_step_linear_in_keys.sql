-- +goose Up
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
  v_new text[];
  v_empty text[];
  v_low_keys text[];
  v_contended text[];
  v_contended_new text[];
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
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE NOT e.found),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.held AND h.head_id IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.held AND h.floor_id > u.lo),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE e.found AND h.held IS NULL)
      INTO v_any_late, v_late_clocks, v_new, v_empty, v_low_keys, v_contended
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
                       FOR KEY SHARE SKIP LOCKED) h ON true;
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
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE u.k = ANY (v_new)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_contended_new FROM pg_catalog.unnest(v_new) AS k
    WHERE k NOT IN (SELECT made.partition_key FROM made);
    v_contended := v_contended || v_contended_new;
    v_wrote := true;
  END IF;
  IF v_empty IS NOT NULL OR v_low_keys IS NOT NULL THEN
    WITH fixed AS (
      UPDATE outbox.partition_heads h
      SET head_id = COALESCE(h.head_id, u.lo),
          parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
          floor_id = LEAST(h.floor_id, u.lo)
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k
        AND (u.k = ANY (v_empty) OR u.k = ANY (v_low_keys))
        AND h.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.partition_heads x
                                WHERE x.queue_id = p_q.queue_id
                                  AND (x.partition_key = ANY (v_empty) OR x.partition_key = ANY (v_low_keys))
                                FOR NO KEY UPDATE SKIP LOCKED))
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_contended_new
    FROM pg_catalog.unnest(v_empty || v_low_keys) AS k
    WHERE k NOT IN (SELECT fixed.partition_key FROM fixed);
    v_contended := v_contended || v_contended_new;
    v_wrote := true;
  END IF;
  IF v_contended IS NOT NULL THEN
    INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id)
    SELECT p_q.queue_id, u.k, u.lo FROM unnest(v_keys, v_mins) AS u(k, lo) WHERE u.k = ANY (v_contended);
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

