-- +goose Up
-- +goose StatementBegin
-- Finds the pending deliverable rows of a partitioned queue that no claim can reach, and (unless
-- dry_run) makes them reachable again. Partition heads, floors and parks are a cache of the queue
-- table (outbox.partition_heads); this checks the cache against the table, one key at a time:
--   missing_head     the key has a deliverable row but no head: no claim would ever look at it;
--   floor_above_row  the head's floor (below it, everything is taken to be sent or poisoned) is above
--                    the key's first deliverable row: that row would never be found;
--   parked_past_due  the head is parked (lease or backoff) more than a second past the time its first
--                    deliverable row is due.
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

  FOR r IN EXECUTE pg_catalog.format(
    'WITH RECURSIVE keys(k) AS (
       (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL ORDER BY t.%2$I LIMIT 1)
       UNION ALL
       SELECT (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL AND t.%2$I > keys.k ORDER BY t.%2$I LIMIT 1)
       FROM keys WHERE keys.k IS NOT NULL)
     SELECT s.key, s.cause, s.head_id, s.row_id, s.detail FROM (
       SELECT keys.k::text AS key, h.head_id, f.id AS row_id,
              CASE WHEN h.queue_id IS NULL THEN ''missing_head''
                   WHEN h.floor_id > f.id THEN ''floor_above_row''
                   WHEN h.parked_until > f.due + interval ''1 second'' THEN ''parked_past_due'' END AS cause,
              CASE WHEN h.queue_id IS NULL THEN pg_catalog.format(''row %%s has no partition head'', f.id)
                   WHEN h.floor_id > f.id THEN pg_catalog.format(''floor %%s is above row %%s'', h.floor_id, f.id)
                   ELSE pg_catalog.format(''head parked until %%s, row %%s due at %%s'', h.parked_until, f.id, f.due)
              END AS detail
       FROM keys
       CROSS JOIN LATERAL (
         SELECT t.id, GREATEST(t.next_attempt_at, t.leased_until, $3) AS due FROM %1$s t
         WHERE t.%2$I = keys.k AND t.sent_at IS NULL AND t.attempt_count < $2
         ORDER BY t.id LIMIT 1) f
       LEFT JOIN outbox.partition_heads h ON h.queue_id = $1 AND h.partition_key = keys.k::text
       -- A key with a wake note is not stuck: the next claim applies the note (outbox._apply_wakes).
       WHERE keys.k IS NOT NULL
         AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                         WHERE w.queue_id = $1 AND w.partition_key = keys.k::text)) s
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
-- Back to 00010: repair's check ignores wake notes again (the function below).
SELECT 1;
-- +goose StatementEnd

-- +goose StatementBegin
-- Finds the pending deliverable rows of a partitioned queue that no claim can reach, and (unless
-- dry_run) makes them reachable again. Partition heads, floors and parks are a cache of the queue
-- table (outbox.partition_heads); this checks the cache against the table, one key at a time:
--   missing_head     the key has a deliverable row but no head: no claim would ever look at it;
--   floor_above_row  the head's floor (below it, everything is taken to be sent or poisoned) is above
--                    the key's first deliverable row: that row would never be found;
--   parked_past_due  the head is parked (lease or backoff) more than a second past the time its first
--                    deliverable row is due.
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

  FOR r IN EXECUTE pg_catalog.format(
    'WITH RECURSIVE keys(k) AS (
       (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL ORDER BY t.%2$I LIMIT 1)
       UNION ALL
       SELECT (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL AND t.%2$I > keys.k ORDER BY t.%2$I LIMIT 1)
       FROM keys WHERE keys.k IS NOT NULL)
     SELECT s.key, s.cause, s.head_id, s.row_id, s.detail FROM (
       SELECT keys.k::text AS key, h.head_id, f.id AS row_id,
              CASE WHEN h.queue_id IS NULL THEN ''missing_head''
                   WHEN h.floor_id > f.id THEN ''floor_above_row''
                   WHEN h.parked_until > f.due + interval ''1 second'' THEN ''parked_past_due'' END AS cause,
              CASE WHEN h.queue_id IS NULL THEN pg_catalog.format(''row %%s has no partition head'', f.id)
                   WHEN h.floor_id > f.id THEN pg_catalog.format(''floor %%s is above row %%s'', h.floor_id, f.id)
                   ELSE pg_catalog.format(''head parked until %%s, row %%s due at %%s'', h.parked_until, f.id, f.due)
              END AS detail
       FROM keys
       CROSS JOIN LATERAL (
         SELECT t.id, GREATEST(t.next_attempt_at, t.leased_until, $3) AS due FROM %1$s t
         WHERE t.%2$I = keys.k AND t.sent_at IS NULL AND t.attempt_count < $2
         ORDER BY t.id LIMIT 1) f
       LEFT JOIN outbox.partition_heads h ON h.queue_id = $1 AND h.partition_key = keys.k::text
       WHERE keys.k IS NOT NULL) s
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

