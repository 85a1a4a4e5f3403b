-- +goose Up
-- +goose StatementBegin
-- Per-key commit order (issue 6): the largest committed id per (queue, 16-bit key hash), written
-- only by producers' commit step under the hash's commit lock (outbox._commit_partitions). A
-- producer whose smallest id of a key is below it committed late and has its rows renumbered.
-- UNLOGGED like partition_heads: crash recovery ends every open transaction, so an empty table is
-- a correct state to restart from.
CREATE UNLOGGED TABLE outbox.partition_clocks (
  queue_id integer NOT NULL,
  slot integer NOT NULL,
  committed_max bigint NOT NULL,
  PRIMARY KEY (queue_id, slot)
) WITH (fillfactor = 50);
COMMENT ON TABLE outbox.partition_clocks IS
  'Largest committed id per queue and key hash (hashtext(key) & 65535), for per-key commit order (internal).';

-- One row per open transaction that wrote a partitioned queue, inserted by its first statement
-- and deleted by its commit step; its only purpose is the deferred trigger event (see
-- outbox.tg_queue__commit). Keeping that event off the queue tables keeps their DDL and TRUNCATE
-- possible in the producing transaction.
CREATE UNLOGGED TABLE outbox.commit_hooks (
  xid xid8 PRIMARY KEY DEFAULT pg_catalog.pg_current_xact_id()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
COMMENT ON TABLE outbox.commit_hooks IS
  'Producers'' open transactions, each queueing its commit step (internal; empty when idle).';
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of a partitioned queue. It takes the partitions' advisory
-- locks SHARED until this transaction ends (producers never block each other, and no claim deletes
-- a head or raises a floor over rows that are not committed yet), then notes the statement's keys,
-- with the smallest and largest new id of each, for this transaction's commit step
-- (outbox.tg_queue__commit, queued here once per transaction), which orders them, renumbers late
-- rows and creates missing heads.
-- Nothing is written here: a producer never waits on another producer's uncommitted head.
-- The partition lock: advisory lock (1885823232 + queue_id, hashtext(key) & 1023), i.e. 1024 slots
-- per queue, so a 10,000-key insert takes at most 1024 locks and the lock table does not overflow.
-- Arguments: queue_id, partition column.
CREATE OR REPLACE FUNCTION outbox.tg_queue__heads()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_queue_id integer := TG_ARGV[0]::integer;
  v_setting constant text := 'pgdrain.commit_' || TG_RELID;
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
  v_queues text;
BEGIN
  -- Rows that become claimable do so at commit, where the commit step sends the NOTIFY.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || TG_RELID, 'on', true);
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k),
            pg_catalog.array_agg(hi ORDER BY k)
       FROM (SELECT %I::text AS k, pg_catalog.min(id) AS lo, pg_catalog.max(id) AS hi
               FROM pgdrain_new_rows WHERE sent_at IS NULL GROUP BY 1) s', TG_ARGV[1])
    INTO v_keys, v_mins, v_maxs;
  IF v_keys IS NULL THEN
    RETURN NULL;
  END IF;

  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + v_queue_id, s.slot)
  FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 1023 AS slot
        FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;

  -- Merge with the keys of this transaction's earlier statements. The settings are transaction
  -- local, so a rolled back savepoint takes its keys with it, like its rows.
  IF pg_catalog.current_setting(v_setting || '_keys', true) <> '' THEN
    SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k),
           pg_catalog.array_agg(hi ORDER BY k)
      INTO v_keys, v_mins, v_maxs
    FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
          FROM (SELECT * FROM unnest(v_keys, v_mins, v_maxs)
                UNION ALL
                SELECT * FROM unnest(
                  pg_catalog.current_setting(v_setting || '_keys')::text[],
                  pg_catalog.current_setting(v_setting || '_mins')::bigint[],
                  pg_catalog.current_setting(v_setting || '_maxs')::bigint[])) AS u(k, lo, hi)
          GROUP BY u.k) s;
  END IF;
  PERFORM pg_catalog.set_config(v_setting || '_keys', v_keys::text, true),
          pg_catalog.set_config(v_setting || '_mins', v_mins::text, true),
          pg_catalog.set_config(v_setting || '_maxs', v_maxs::text, true);

  v_queues := COALESCE(NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), ''), '{}');
  IF NOT TG_RELID::text = ANY (v_queues::text[]) THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_queues',
                                  (v_queues::text[] || TG_RELID::text)::text, true);
  END IF;
  -- The first statement of the transaction queues the commit step: a row in outbox.commit_hooks,
  -- whose deferred constraint trigger fires at COMMIT. The pending trigger event is on that table,
  -- not on the queue table, so DDL and TRUNCATE of the queue in the same transaction still work.
  IF pg_catalog.current_setting('pgdrain.commit_armed', true) IS DISTINCT FROM 'on' THEN
    INSERT INTO outbox.commit_hooks DEFAULT VALUES;
    PERFORM pg_catalog.set_config('pgdrain.commit_armed', 'on', true);
  END IF;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), whose row outbox.tg_queue__heads inserts once per transaction,
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
    ORDER BY q.queue_id
  LOOP
    PERFORM outbox._commit_partitions(v_q);
  END LOOP;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit):
-- makes per-key delivery order equal commit order, and gives new keys their partition head.
--
-- 1. Takes the commit lock of every key hash the transaction wrote (hashtext(key) & 65535),
--    exclusively, in hash order, held until the commit is complete (advisory lock
--    (1885823232 + queue_id, 65536 + hash)); more than 256 hashes take the queue's whole commit
--    lock (objid -2) instead, so a bulk insert does not fill the lock table. Commits that share a
--    hash are serialised from here on; nothing else waits for these locks, so they can not deadlock.
-- 2. A key is late when a transaction that committed before us wrote a row of it (or of a key
--    with the same hash) with a larger id than our smallest: outbox.partition_clocks keeps
--    the largest committed id per hash, written only under these locks. A late key's rows of this
--    transaction get new ids from the id sequence, in their order, larger than every id already
--    given out: delivered order (id order) is then commit order. Not late (the usual case): no row
--    is written twice.
-- 3. Creates the heads of new keys (no waiting on producers: heads are created only here, under
--    the key's commit lock), wakes a head a claim left empty while we were open, and lowers a floor
--    that lies above our rows; NOTIFY when a partition became claimable.
-- 4. Raises the clocks to our largest ids.
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
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
  v_keys text[] := NULLIF(pg_catalog.current_setting(v_setting || '_keys', true), '')::text[];
  v_mins bigint[] := NULLIF(pg_catalog.current_setting(v_setting || '_mins', true), '')::bigint[];
  v_maxs bigint[] := NULLIF(pg_catalog.current_setting(v_setting || '_maxs', true), '')::bigint[];
  v_renumbered boolean := false;
  v_issued bigint;
  v_sequence constant regclass := pg_catalog.pg_get_serial_sequence(p_q.table_oid::regclass::text, 'id')::regclass;
  v_late text[];
  v_late_los bigint[];
  v_late_his bigint[];
  v_late_clocks bigint[];
  v_new text[];
  v_empty text[];
  v_low_keys text[];
  v_low_ids bigint[];
  i integer;
BEGIN
  PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
          pg_catalog.set_config(v_setting || '_mins', '', true),
          pg_catalog.set_config(v_setting || '_maxs', '', true);
  IF v_keys IS NULL THEN
    RETURN;
  END IF;

  IF pg_catalog.cardinality(v_keys) > 256
     AND (SELECT pg_catalog.count(DISTINCT pg_catalog.hashtext(k) & 65535) FROM pg_catalog.unnest(v_keys) AS k) > 256 THEN
    PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -2);
  ELSE
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_q.queue_id, -2),
            pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, 65536 + s.slot)
    FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 65535 AS slot FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of the clocks and the heads (LATERAL: index probes whatever the statistics
  -- of these small tables say). Late keys are renumbered, then probed again.
  LOOP
    SELECT pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(u.lo ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(u.hi ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(c.committed_max ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.found IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.found AND h.head_id IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.floor_id > u.lo),
           pg_catalog.array_agg(u.lo ORDER BY u.k) FILTER (WHERE h.floor_id > u.lo)
      INTO v_late, v_late_los, v_late_his, v_late_clocks, v_new, v_empty, v_low_keys, v_low_ids
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    LEFT JOIN LATERAL (SELECT x.committed_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535) c ON true
    LEFT JOIN LATERAL (SELECT true AS found, x.head_id, x.floor_id FROM outbox.partition_heads x
                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k) h ON true;
    EXIT WHEN v_late IS NULL OR v_renumbered;
    SELECT pg_catalog.array_agg(u.k ORDER BY u.k),
           pg_catalog.array_agg(COALESCE(r.lo, u.lo) ORDER BY u.k),
           pg_catalog.array_agg(COALESCE(r.hi, u.hi) ORDER BY u.k)
      INTO v_keys, v_mins, v_maxs
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    LEFT JOIN outbox._renumber_late_rows(p_q, v_sequence, v_late, v_late_los, v_late_his, v_late_clocks) r
      ON r.k = u.k;
    v_renumbered := true;
  END LOOP;

  -- New keys get their heads (in key order; DO NOTHING covers a head this transaction's own claims
  -- made). A floor above our rows (only possible for ids given explicitly or without a sequence,
  -- which are not renumbered) is lowered, one key at a time in key order.
  -- A head left empty and parked by a claim that ran while we were open: wake it for our rows.
  IF v_empty IS NOT NULL THEN
    FOR i IN 1..pg_catalog.cardinality(v_keys) LOOP
      CONTINUE WHEN v_keys[i] <> ALL (v_empty);
      UPDATE outbox.partition_heads h SET head_id = v_mins[i], parked_until = NULL
      WHERE h.queue_id = p_q.queue_id AND h.partition_key = v_keys[i] AND h.head_id IS NULL;
    END LOOP;
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  IF v_new IS NOT NULL THEN
    WITH ins AS (
      INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo, u.lo
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE u.k = ANY (v_new)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING 1)
    SELECT CASE WHEN EXISTS (SELECT 1 FROM ins) THEN v_new END INTO v_new;
    IF v_new IS NOT NULL THEN
      PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
    END IF;
  END IF;
  IF v_low_keys IS NOT NULL THEN
    FOR i IN 1..pg_catalog.cardinality(v_low_keys) LOOP
      UPDATE outbox.partition_heads h SET floor_id = v_low_ids[i]
      WHERE h.queue_id = p_q.queue_id AND h.partition_key = v_low_keys[i] AND h.floor_id > v_low_ids[i];
    END LOOP;
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
-- Gives this transaction's pending rows of the late keys new ids from the queue's id sequence, in
-- their order: larger than every id given out so far, so also than every committed row of the key
-- (see outbox._commit_partitions). Returns each renumbered key with its new smallest and largest id.
-- Skipped (the key keeps id order, and commits after a larger id keep that position) when ids do
-- not come from a sequence, or the sequence is behind the committed ids (ids given explicitly):
-- a new id must be larger than the committed ones and must not collide with a later default.
-- Arguments: the queue's id sequence (NULL: none), the late keys, and for each (aligned arrays)
-- this transaction's smallest and largest id and the key's clock as the caller read it.
CREATE OR REPLACE FUNCTION outbox._renumber_late_rows(p_q outbox.queues, p_sequence regclass, p_keys text[],
                                                      p_los bigint[], p_his bigint[], p_clocks bigint[])
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table regclass := p_q.table_oid::regclass;
  v_ids bigint[];
  v_old bigint;
  v_new bigint;
  i integer;
BEGIN
  IF p_sequence IS NULL THEN
    RETURN;
  END IF;
  FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
    CONTINUE WHEN COALESCE(pg_catalog.pg_sequence_last_value(p_sequence), 0) < p_clocks[i];

    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
       WHERE t.%I = $1::%s AND t.id BETWEEN $2 AND $3 AND t.sent_at IS NULL
         AND outbox._written_here(t.xmin)', v_table, p_q.partition_column, p_q.partition_type)
      INTO v_ids USING p_keys[i], p_los[i], p_his[i];
    CONTINUE WHEN v_ids IS NULL;

    k := p_keys[i];
    lo := NULL;
    FOREACH v_old IN ARRAY v_ids LOOP
      EXECUTE pg_catalog.format(
        'UPDATE %s SET id = pg_catalog.nextval($2) WHERE id = $1 RETURNING id', v_table)
        INTO v_new USING v_old, p_sequence;
      lo := COALESCE(lo, v_new);
    END LOOP;
    hi := v_new;
    RETURN NEXT;
  END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- True when a row version with this xmin was written by the current transaction (or one of its
-- subtransactions): the only writer in progress whose rows the caller can see. xmin is 32 bits; it
-- is widened against the current transaction's full id for pg_xact_status. Subtransaction ids are
-- newer than their top transaction, so an older xmin is someone else's without a lookup. (Callers
-- pass rows written while this transaction was open, never rows old enough to have wrapped.)
CREATE OR REPLACE FUNCTION outbox._written_here(p_xmin xid)
RETURNS boolean
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT w.full_xid >= m.top AND pg_catalog.pg_xact_status(w.full_xid::text::xid8) = 'in progress'
  FROM (SELECT pg_catalog.pg_current_xact_id()::text::bigint AS top) m
  CROSS JOIN LATERAL (
    SELECT m.top + ((p_xmin::text::bigint - (m.top % 4294967296) + 6442450944) % 4294967296 - 2147483648)
           AS full_xid) w;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unregisters a queue: removes its triggers, partition heads and clocks and registry row; with
-- drop_table = true also drops the table. The indexes stay with the table.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_q.table_oid::regclass);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_q.table_oid::regclass);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_q.table_oid::regclass);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The claim behind claim_batch (mode 'lease') and claim_locked (mode 'lock'). Returns the ids of
-- the claimed rows; the caller reads them back. Deliverable = unsent, not poisoned, due, lease free
-- or expired, and on a partitioned queue the first deliverable row of its partition.
--
-- Partitioned queues claim through outbox.partition_heads (one row per partition with pending
-- work), never through the pending rows themselves, so blocked successors, leased heads, heads in
-- backoff and poisoned rows cost nothing: a head that is leased or backing off is "parked" until
-- its time and is woken (at most a bounded number per call) when that time has come. Heads are
-- locked FOR NO KEY UPDATE SKIP LOCKED, which concurrent claimers skip and producers (who hold
-- only advisory locks) do not wait for. Each candidate is still checked against the FIFO rule on the queue table,
-- from the partition's floor (below it every row is sent or poisoned), so poisoned rows in front of
-- a head are not walked again on every claim.
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
  v_due constant text := 't.sent_at IS NULL AND t.attempt_count < $2
    AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= pg_catalog.now())
    AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.now())';
  v_all bigint[] := '{}';
  v_ids bigint[];
  v_keys text[];
  v_heads bigint[];
  v_floors bigint[];
  v_ctids tid[];
  v_claimed_ctids tid[];
  v_claimed_keys text[];
  v_stale text[];
  v_remaining integer := p_batch_size;
BEGIN
  IF p_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, v_due)
      INTO v_all USING p_batch_size, p_q.max_attempts;
    v_all := COALESCE(v_all, '{}');
    IF p_mode = 'lease' AND pg_catalog.cardinality(v_all) > 0 THEN
      EXECUTE pg_catalog.format(
        'UPDATE %s SET lease_token = pg_catalog.gen_random_uuid(), leased_until = pg_catalog.now() + $2
         WHERE id = ANY ($1)', v_table)
        USING v_all, p_lease;
    END IF;
    RETURN v_all;
  END IF;

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now.
  IF pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys', true) <> '' THEN
    PERFORM outbox._refresh_heads(p_q,
      pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys')::text[]);
  END IF;

  -- Wake parked heads whose lease or backoff has ended, oldest first, a bounded number per call.
  -- By ctid: a TID scan touches exactly these heads whatever the statistics say.
  UPDATE outbox.partition_heads h SET parked_until = NULL
  WHERE h.ctid = ANY (ARRAY(
    SELECT w.ctid FROM outbox.partition_heads w
    WHERE w.queue_id = p_q.queue_id AND w.parked_until <= pg_catalog.now()
    ORDER BY w.parked_until
    LIMIT GREATEST(4 * p_batch_size, 64)
    FOR NO KEY UPDATE SKIP LOCKED));

  FOR pass IN 1..3 LOOP
    SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
           pg_catalog.array_agg(s.floor_id), pg_catalog.array_agg(s.ctid)
      INTO v_keys, v_heads, v_floors, v_ctids
    FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.ctid FROM outbox.partition_heads h
          WHERE h.queue_id = p_q.queue_id AND h.parked_until IS NULL
            -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
            -- locks: without this a later pass would take them again.
            AND (h.head_id IS NULL OR h.head_id <> ALL (v_all))
          ORDER BY h.attempt_count, h.head_id
          LIMIT v_remaining
          FOR NO KEY UPDATE SKIP LOCKED) s;
    EXIT WHEN v_keys IS NULL;

    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(t.id), pg_catalog.array_agg(t.%2$I::text), pg_catalog.array_agg(t.head_ctid)
       FROM (
         SELECT t.id, t.%2$I, c.head_ctid
         FROM unnest($1::bigint[], $3::bigint[], $4::tid[], $5::text[]) AS c(id, floor_id, head_ctid, key)
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
         FOR UPDATE OF t SKIP LOCKED) t',
      v_table, p_q.partition_column, v_due, p_q.partition_type)
      INTO v_ids, v_claimed_keys, v_claimed_ctids USING v_heads, p_q.max_attempts, v_floors, v_ctids, v_keys;

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_mode = 'lease' THEN
        EXECUTE pg_catalog.format(
          'UPDATE %s SET lease_token = pg_catalog.gen_random_uuid(), leased_until = pg_catalog.now() + $2
           WHERE id = ANY ($1)', v_table)
          USING v_ids, p_lease;
        UPDATE outbox.partition_heads h SET parked_until = pg_catalog.now() + p_lease
        WHERE h.ctid = ANY (v_claimed_ctids);
      END IF;
    END IF;

    -- Heads that pointed at a row that is no longer (or not yet) the partition's deliverable head.
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k <> ALL (COALESCE(v_claimed_keys, '{}'));
    EXIT WHEN v_stale IS NULL;
    PERFORM outbox._refresh_heads(p_q, v_stale);
    EXIT WHEN v_remaining <= 0;
  END LOOP;
  RETURN v_all;
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
CREATE CONSTRAINT TRIGGER pgdrain_commit AFTER INSERT ON outbox.commit_hooks
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox.tg_queue__commit();
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migrations 00002 and 00003 carry the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__heads() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the queue table, granted per table
-- (GRANT INSERT ON public.events TO pgdrain_producer); the heads and commit triggers run as definer.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.apply_result(text, bigint, uuid, text, text),
  outbox.apply_results(text, bigint[], uuid[], text[], text[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.settle_locked(text, bigint[], text[], text[])
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

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Back to 00002: the commit step and its tables go; the functions 00003 replaced get their 00002
-- bodies back, and the privileges of 00002 are applied again (CREATE OR REPLACE resets DEFINER).
DROP TABLE outbox.commit_hooks;
DROP FUNCTION outbox.tg_queue__commit();
DROP FUNCTION outbox._commit_partitions(outbox.queues);
DROP FUNCTION outbox._renumber_late_rows(outbox.queues, regclass, text[], bigint[], bigint[], bigint[]);
DROP FUNCTION outbox._written_here(xid);
DROP TABLE outbox.partition_clocks;
-- Statement-level AFTER INSERT trigger of a partitioned queue: makes sure every key written by the
-- statement has a row in outbox.partition_heads, so claims never walk blocked successors.
-- It first takes the partitions' advisory locks SHARED (see below) until this
-- transaction ends: producers never block each other, and nobody deletes a head or raises a floor
-- over rows that are not committed yet. No tuple is written for a key that already has a head.
-- The partition lock: advisory lock (1885823232 + queue_id, hashtext(key) & 1023), i.e. 1024 slots
-- per queue, so a 10,000-key insert takes at most 1024 locks and the lock table does not overflow.
-- Arguments: queue_id, partition column.
CREATE OR REPLACE FUNCTION outbox.tg_queue__heads()
RETURNS trigger
LANGUAGE plpgsql
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
  v_queue_id integer := TG_ARGV[0]::integer;
  v_keys text[];
  v_ids bigint[];
  v_new_keys text[];
  v_new_ids bigint[];
  v_low_keys text[];
  v_low_ids bigint[];
  v_low record;
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(min_id ORDER BY k)
       FROM (SELECT %I::text AS k, pg_catalog.min(id) AS min_id
               FROM pgdrain_new_rows WHERE sent_at IS NULL GROUP BY 1) s', TG_ARGV[1])
    INTO v_keys, v_ids;
  IF v_keys IS NULL THEN
    PERFORM pg_catalog.set_config('pgdrain.quiet_' || TG_RELID, 'on', true);
    RETURN NULL;
  END IF;

  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + v_queue_id, s.slot)
  FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 1023 AS slot
        FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;

  -- One index probe per key finds the keys with no head yet and the heads whose floor was raised
  -- past our rows (the raiser could not see them yet); both are rare, and only they are written.
  SELECT pg_catalog.array_agg(u.k) FILTER (WHERE h.floor_id IS NULL),
         pg_catalog.array_agg(u.id) FILTER (WHERE h.floor_id IS NULL),
         pg_catalog.array_agg(u.k) FILTER (WHERE h.floor_id > u.id),
         pg_catalog.array_agg(u.id) FILTER (WHERE h.floor_id > u.id)
    INTO v_new_keys, v_new_ids, v_low_keys, v_low_ids
  FROM unnest(v_keys, v_ids) AS u(k, id)
  -- LATERAL: a probe on both key columns per key, whatever the statistics of the heads table say
  -- (a join may scan every head of the queue when they were last analyzed while it was empty).
  LEFT JOIN LATERAL (SELECT x.floor_id FROM outbox.partition_heads x
                     WHERE x.queue_id = v_queue_id AND x.partition_key = u.k) h ON true;

  -- New heads, in key order, never waiting on a committed one (DO NOTHING takes no lock). A key
  -- whose head another producer made meanwhile may carry a floor above our rows: lowered below.
  IF v_new_keys IS NOT NULL THEN
    WITH ins AS (
      INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
      SELECT v_queue_id, u.k, u.id, u.id
      FROM unnest(v_new_keys, v_new_ids) AS u(k, id)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING partition_key)
    SELECT pg_catalog.array_cat(v_low_keys, pg_catalog.array_agg(u.k)),
           pg_catalog.array_cat(v_low_ids, pg_catalog.array_agg(u.id))
      INTO v_low_keys, v_low_ids
    FROM unnest(v_new_keys, v_new_ids) AS u(k, id)
    WHERE u.k NOT IN (SELECT ins.partition_key FROM ins);
  END IF;

  -- Tell pgdrain_notify (fired next) whether this statement made any partition claimable.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || TG_RELID,
                                CASE WHEN v_new_keys IS NULL THEN 'on' ELSE 'off' END, true);

  -- Rows that got their ids before a floor was raised past them (the raiser could not see them
  -- yet): lower the floor so the head search finds them. Rare; one key at a time in key order, so
  -- two producers never lock the same heads in opposite orders.
  IF v_low_keys IS NOT NULL THEN
    FOR v_low IN
      SELECT u.k, pg_catalog.min(u.id) AS id FROM unnest(v_low_keys, v_low_ids) AS u(k, id)
      GROUP BY u.k ORDER BY u.k
    LOOP
      UPDATE outbox.partition_heads h SET floor_id = v_low.id
      WHERE h.queue_id = v_queue_id AND h.partition_key = v_low.k AND h.floor_id > v_low.id;
    END LOOP;
  END IF;
  RETURN NULL;
END;
$$;
-- Unregisters a queue: removes its triggers, partition heads and registry row; with
-- drop_table = true also drops the table. The indexes stay with the table.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_q.table_oid::regclass);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_q.table_oid::regclass);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_q.table_oid::regclass);
  END IF;
END;
$$;
-- The claim behind claim_batch (mode 'lease') and claim_locked (mode 'lock'). Returns the ids of
-- the claimed rows; the caller reads them back. Deliverable = unsent, not poisoned, due, lease free
-- or expired, and on a partitioned queue the first deliverable row of its partition.
--
-- Partitioned queues claim through outbox.partition_heads (one row per partition with pending
-- work), never through the pending rows themselves, so blocked successors, leased heads, heads in
-- backoff and poisoned rows cost nothing: a head that is leased or backing off is "parked" until
-- its time and is woken (at most a bounded number per call) when that time has come. Heads are
-- locked FOR NO KEY UPDATE SKIP LOCKED, which concurrent claimers skip and producers (who hold
-- only advisory locks) do not wait for. Each candidate is still checked against the FIFO rule on the queue table,
-- from the partition's floor (below it every row is sent or poisoned), so poisoned rows in front of
-- a head are not walked again on every claim.
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
  v_due constant text := 't.sent_at IS NULL AND t.attempt_count < $2
    AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= pg_catalog.now())
    AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.now())';
  v_all bigint[] := '{}';
  v_ids bigint[];
  v_keys text[];
  v_heads bigint[];
  v_floors bigint[];
  v_ctids tid[];
  v_claimed_ctids tid[];
  v_claimed_keys text[];
  v_stale text[];
  v_remaining integer := p_batch_size;
BEGIN
  IF p_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, v_due)
      INTO v_all USING p_batch_size, p_q.max_attempts;
    v_all := COALESCE(v_all, '{}');
    IF p_mode = 'lease' AND pg_catalog.cardinality(v_all) > 0 THEN
      EXECUTE pg_catalog.format(
        'UPDATE %s SET lease_token = pg_catalog.gen_random_uuid(), leased_until = pg_catalog.now() + $2
         WHERE id = ANY ($1)', v_table)
        USING v_all, p_lease;
    END IF;
    RETURN v_all;
  END IF;

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
  END IF;

  -- Wake parked heads whose lease or backoff has ended, oldest first, a bounded number per call.
  -- By ctid: a TID scan touches exactly these heads whatever the statistics say.
  UPDATE outbox.partition_heads h SET parked_until = NULL
  WHERE h.ctid = ANY (ARRAY(
    SELECT w.ctid FROM outbox.partition_heads w
    WHERE w.queue_id = p_q.queue_id AND w.parked_until <= pg_catalog.now()
    ORDER BY w.parked_until
    LIMIT GREATEST(4 * p_batch_size, 64)
    FOR NO KEY UPDATE SKIP LOCKED));

  FOR pass IN 1..3 LOOP
    SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
           pg_catalog.array_agg(s.floor_id), pg_catalog.array_agg(s.ctid)
      INTO v_keys, v_heads, v_floors, v_ctids
    FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.ctid FROM outbox.partition_heads h
          WHERE h.queue_id = p_q.queue_id AND h.parked_until IS NULL
            -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
            -- locks: without this a later pass would take them again.
            AND (h.head_id IS NULL OR h.head_id <> ALL (v_all))
          ORDER BY h.attempt_count, h.head_id
          LIMIT v_remaining
          FOR NO KEY UPDATE SKIP LOCKED) s;
    EXIT WHEN v_keys IS NULL;

    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(t.id), pg_catalog.array_agg(t.%2$I::text), pg_catalog.array_agg(t.head_ctid)
       FROM (
         SELECT t.id, t.%2$I, c.head_ctid FROM unnest($1::bigint[], $3::bigint[], $4::tid[]) AS c(id, floor_id, head_ctid)
         JOIN %1$s t ON t.id = c.id
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           AND NOT EXISTS (SELECT 1 FROM %1$s p
                           WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                             AND p.sent_at IS NULL AND p.attempt_count < $2
                           OFFSET 0)
         FOR UPDATE OF t SKIP LOCKED) t',
      v_table, p_q.partition_column, v_due)
      INTO v_ids, v_claimed_keys, v_claimed_ctids USING v_heads, p_q.max_attempts, v_floors, v_ctids;

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_mode = 'lease' THEN
        EXECUTE pg_catalog.format(
          'UPDATE %s SET lease_token = pg_catalog.gen_random_uuid(), leased_until = pg_catalog.now() + $2
           WHERE id = ANY ($1)', v_table)
          USING v_ids, p_lease;
        UPDATE outbox.partition_heads h SET parked_until = pg_catalog.now() + p_lease
        WHERE h.ctid = ANY (v_claimed_ctids);
      END IF;
    END IF;

    -- Heads that pointed at a row that is no longer (or not yet) the partition's deliverable head.
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k <> ALL (COALESCE(v_claimed_keys, '{}'));
    EXIT WHEN v_stale IS NULL;
    PERFORM outbox._refresh_heads(p_q, v_stale);
    EXIT WHEN v_remaining <= 0;
  END LOOP;
  RETURN v_all;
END;
$$;
-- Statement-level AFTER INSERT trigger: one NOTIFY per statement (PostgreSQL folds identical
-- notifications of one transaction into one), never one per row. On a partitioned queue it stays
-- quiet when the statement only added rows behind existing partition heads (pgdrain_heads fires
-- first and says so): those rows become claimable when their head is done, and the drainer that
-- finishes the head claims again at once. NOTIFY takes a cluster-wide lock at commit, so skipping
-- it is what keeps many concurrent producers of busy keys from queueing behind each other.
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
-- Who may call what in schema outbox (canonical source; migration 00002 carries the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__heads() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the queue table, granted per table
-- (GRANT INSERT ON public.events TO pgdrain_producer); the heads trigger runs as definer.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.apply_result(text, bigint, uuid, text, text),
  outbox.apply_results(text, bigint[], uuid[], text[], text[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.settle_locked(text, bigint[], text[], text[])
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

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.
-- +goose StatementEnd
