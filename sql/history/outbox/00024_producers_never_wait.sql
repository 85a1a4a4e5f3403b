-- +goose Up
-- +goose StatementBegin
-- New queues notify only while a drainer waits (set_notify 'when_waiting'); registered queues keep
-- what they have (issue 29, item 3).
ALTER TABLE outbox.queues ALTER COLUMN notify SET DEFAULT 'when_waiting';
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
      -- that exists (a claim holds it, or it needs a fix) is left to outbox._commit_keys, also one
      -- a claim's open transaction deleted: the probe above skips it (locked), this snapshot still
      -- sees it, and an insert of the key would wait on that transaction's index entry (issue 29: a
      -- lock-mode batch that delivered a key's last row held its producers at COMMIT).
      IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                   WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_key) THEN
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
-- When a queue's producers NOTIFY its channel:
--   'always': every insert of an unpartitioned queue, every commit that made a partition of a
--     partitioned queue claimable. Any LISTENing client is woken.
--   'when_waiting' (the default for queues created since 00024): only while a drainer waits for a
--     NOTIFY, which it says with outbox.drainer_waits
--     before it sleeps (and outbox.drainer_woke when a NOTIFY woke it). NOTIFY takes a cluster-wide
--     lock from commit until the commit's WAL flush is done, so concurrent producers that notify
--     commit one at a time; while the drainers are busy nobody needs one. The Go drainer does this
--     by itself; another client that only LISTENs is then woken only by its own polling.
-- Owner only, like create_queue (it replaces the queue's NOTIFY trigger). Idempotent; kept when
-- create_queue runs again.
CREATE OR REPLACE FUNCTION outbox.set_notify(queue text, notify text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  IF notify IS NULL OR notify NOT IN ('always', 'when_waiting') THEN
    RAISE EXCEPTION 'set_notify: notify must be ''always'' or ''when_waiting'', got %',
      COALESCE(pg_catalog.quote_literal(notify), 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('set_notify', queue);
  UPDATE outbox.queues q SET notify = set_notify.notify WHERE q.queue_id = v_q.queue_id
  RETURNING q.* INTO v_q;
  PERFORM outbox._install_notify_trigger(v_q);
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
ALTER TABLE outbox.queues ALTER COLUMN notify SET DEFAULT 'always';
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
-- When a queue's producers NOTIFY its channel:
--   'always' (the default): every insert of an unpartitioned queue, every commit that made a
--     partition of a partitioned queue claimable. Any LISTENing client is woken.
--   'when_waiting': only while a drainer waits for a NOTIFY, which it says with outbox.drainer_waits
--     before it sleeps (and outbox.drainer_woke when a NOTIFY woke it). NOTIFY takes a cluster-wide
--     lock from commit until the commit's WAL flush is done, so concurrent producers that notify
--     commit one at a time; while the drainers are busy nobody needs one. The Go drainer does this
--     by itself; another client that only LISTENs is then woken only by its own polling.
-- Owner only, like create_queue (it replaces the queue's NOTIFY trigger). Idempotent; kept when
-- create_queue runs again.
CREATE OR REPLACE FUNCTION outbox.set_notify(queue text, notify text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  IF notify IS NULL OR notify NOT IN ('always', 'when_waiting') THEN
    RAISE EXCEPTION 'set_notify: notify must be ''always'' or ''when_waiting'', got %',
      COALESCE(pg_catalog.quote_literal(notify), 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('set_notify', queue);
  UPDATE outbox.queues q SET notify = set_notify.notify WHERE q.queue_id = v_q.queue_id
  RETURNING q.* INTO v_q;
  PERFORM outbox._install_notify_trigger(v_q);
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

