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
