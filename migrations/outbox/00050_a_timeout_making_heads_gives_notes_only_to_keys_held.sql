-- +goose Up
-- +goose StatementBegin
-- Makes the partition heads of a commit step's new keys (p_keys, p_ids their smallest ids, p_states
-- aligned: only the keys whose state is 'new' are made) and returns the new keys it did not make,
-- which the caller gives wake notes. A head another session made meanwhile is one of them: committed
-- (ON CONFLICT DO NOTHING), or still being made by an open transaction, a claim applying wake notes
-- or rebuilding heads inside a lock-mode batch (outbox._apply_wakes, outbox._restore_heads). The
-- insert would wait on that transaction's index entry until the batch ends (issue 29); it gives up
-- after 1 ms instead: a producer never waits for a claim.
-- A timeout gives up only the keys it must. The first try inserts every new key in one statement;
-- on a timeout the keys are halved and each half tried again in a block of its own, breadth first
-- (a queue of spans, each level in key order), down to the keys another transaction holds. All of
-- them got wake notes before, whatever the wait was: a CI run's bulk load of 13,333 new keys got
-- as many notes (a moment's wait on the table, its extension lock beside VACUUM, is the likeliest
-- cause), and the claims that applied them read 8 times the buffers. At most 32 tries time out
-- (65-97 ms measured on 2 cores; a stalled table costs no more), then the spans still queued get
-- notes: breadth first, those are the last level's spans around the held keys. Depth first (a
-- stack), the timeouts isolated the first held keys one by one and the cap left clean spans
-- untried: 6 held keys among 600 new keys noted 274 keys, a run of 100 held keys in 2,000 (a
-- rebuild part is a run of keys) 1,051, a run of 40 before 1,000 others all 1,040; breadth first
-- 51, 117 and 41 (TestMakeHeads_HeldKeysLeaveTheOtherNewKeysTheirHeads). Its limit: held keys
-- spread widely (more than a handful, far apart in key order) use up the 32 timeouts at the first
-- levels, and most keys then get notes, as they all did before; and the tries that time out are
-- inserted again, so a bulk load of 13,333 new keys with one key held at its end commits in about
-- 640 ms instead of 180-230 (a review's measurement). Each try that succeeds is a committed
-- subtransaction (about 20 at most here): a transaction whose commit step passes 64 of them (two
-- queues with held keys) overflows its subtransaction cache while it commits. The blocks are
-- entered only by transactions with new keys, one unless a try times out.
-- A new head's floor is its smallest id (poisoned rows before it are not walked again) only while
-- the queue's heads are complete and no wake note waits for the key: after a crash "no head" may
-- mean the heads were lost while older rows of the key are still pending, and a note means a
-- producer before us committed rows of the key while a claim was deleting its head (the note is
-- applied by a later claim, which a claim of our row must not overtake). Then the floor is 0 until
-- a claim raises it. So it is under REPEATABLE READ and SERIALIZABLE: their snapshot may miss a
-- note, and not reading the notes keeps a SERIALIZABLE producer's predicate locks off the page
-- other producers' wake notes go to.
CREATE OR REPLACE FUNCTION outbox._make_heads(p_q outbox.queues, p_keys text[], p_ids bigint[], p_states text[])
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
  v_timeout constant text := pg_catalog.current_setting('lock_timeout');
  v_keys text[];
  v_ids bigint[];
  v_floors boolean;
  v_notes boolean;
  v_spans int[] := '{}';  -- a queue of [first, last] spans of v_keys still to try
  v_first int;
  v_last int;
  v_half int;
  v_timeouts int := 0;
  v_missed text[];
BEGIN
  SELECT pg_catalog.array_agg(u.k ORDER BY u.k), pg_catalog.array_agg(u.lo ORDER BY u.k)
    INTO v_keys, v_ids
  -- Filtered on the aligned state, not with u.k = ANY (new keys): that compares every key with
  -- every new key (a 192,000-row bulk load of 32,000 new keys spent 9.6 s there).
  FROM unnest(p_keys, p_ids, p_states) AS u(k, lo, state)
  WHERE u.state = 'new';
  IF v_keys IS NULL THEN
    RETURN NULL;
  END IF;
  -- Asked once per call, not once per key: whether a floor may be the smallest id at all, and
  -- whether any wake note of the queue exists (usually none) before looking for each key's.
  v_floors := v_read_committed
    AND EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id);
  v_notes := v_floors AND EXISTS (SELECT 1 FROM outbox.partition_wakes w WHERE w.queue_id = p_q.queue_id);

  v_spans := ARRAY[1, pg_catalog.cardinality(v_keys)];
  WHILE pg_catalog.cardinality(v_spans) > 0 LOOP
    v_first := v_spans[1];
    v_last := v_spans[2];
    v_spans := v_spans[3:];
    IF v_timeouts >= 32 THEN
      v_missed := v_missed || v_keys[v_first:v_last];
      CONTINUE;
    END IF;
    BEGIN
      PERFORM pg_catalog.set_config('lock_timeout', '1ms', true);
      WITH made AS (
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        SELECT p_q.queue_id, u.k, u.lo,
               CASE WHEN v_floors
                         AND NOT (v_notes AND EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                                      WHERE w.queue_id = p_q.queue_id AND w.partition_key = u.k))
                    THEN u.lo ELSE 0 END
        FROM unnest(v_keys[v_first:v_last], v_ids[v_first:v_last]) AS u(k, lo)
        ORDER BY u.k
        ON CONFLICT (queue_id, partition_key) DO NOTHING
        RETURNING h.partition_key)
      SELECT v_missed || pg_catalog.array_agg(u.k) INTO v_missed
      FROM unnest(v_keys[v_first:v_last]) AS u(k)
      WHERE u.k NOT IN (SELECT made.partition_key FROM made);
      PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
    EXCEPTION WHEN lock_not_available THEN  -- (a block's settings end with it)
      v_timeouts := v_timeouts + 1;
      IF v_first = v_last THEN
        v_missed := v_missed || v_keys[v_first];
      ELSE
        -- Queued lower half first: each level's spans are tried in key order.
        v_half := (v_first + v_last) / 2;
        v_spans := v_spans || ARRAY[v_first, v_half, v_half + 1, v_last];
      END IF;
    END;
  END LOOP;
  RETURN v_missed;
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
  SELECT '0.1.0'::text, 50;
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
-- Makes the partition heads of a commit step's new keys (p_keys, p_ids their smallest ids, p_states
-- aligned: only the keys whose state is 'new' are made) and returns the new keys it did not make,
-- which the caller gives wake notes. A head another session made meanwhile is one of them: committed
-- (ON CONFLICT DO NOTHING), or still being made by an open transaction, a claim applying wake notes
-- or rebuilding heads inside a lock-mode batch (outbox._apply_wakes, outbox._restore_heads). The
-- insert would wait on that transaction's index entry until the batch ends (issue 29); it gives up
-- after lock_timeout instead, and makes none of them: a producer never waits for a claim. The
-- subtransaction of the EXCEPTION block is entered only by transactions with new keys.
-- A new head's floor is its smallest id (poisoned rows before it are not walked again) only while
-- the queue's heads are complete and no wake note waits for the key: after a crash "no head" may
-- mean the heads were lost while older rows of the key are still pending, and a note means a
-- producer before us committed rows of the key while a claim was deleting its head (the note is
-- applied by a later claim, which a claim of our row must not overtake). Then the floor is 0 until
-- a claim raises it. So it is under REPEATABLE READ and SERIALIZABLE: their snapshot may miss a
-- note, and not reading the notes keeps a SERIALIZABLE producer's predicate locks off the page
-- other producers' wake notes go to.
CREATE OR REPLACE FUNCTION outbox._make_heads(p_q outbox.queues, p_keys text[], p_ids bigint[], p_states text[])
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1ms'
AS $$
DECLARE
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
  v_floors boolean;
  v_notes boolean;
  v_missed text[];
BEGIN
  -- Asked once per call, not once per key: whether a floor may be the smallest id at all, and
  -- whether any wake note of the queue exists (usually none) before looking for each key's. In
  -- the block, as every read here: a lock timeout on any of them makes no head, never an error.
  v_floors := v_read_committed
    AND EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id);
  v_notes := v_floors AND EXISTS (SELECT 1 FROM outbox.partition_wakes w WHERE w.queue_id = p_q.queue_id);
  WITH made AS (
    INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
    SELECT p_q.queue_id, u.k, u.lo,
           CASE WHEN v_floors
                     AND NOT (v_notes AND EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                                  WHERE w.queue_id = p_q.queue_id AND w.partition_key = u.k))
                THEN u.lo ELSE 0 END
    -- Filtered on the aligned state, not with u.k = ANY (new keys): that compares every key with
    -- every new key (a 192,000-row bulk load of 32,000 new keys spent 9.6 s there).
    FROM unnest(p_keys, p_ids, p_states) AS u(k, lo, state)
    WHERE u.state = 'new'
    ORDER BY u.k
    ON CONFLICT (queue_id, partition_key) DO NOTHING
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(u.k) INTO v_missed
  FROM unnest(p_keys, p_states) AS u(k, state)
  WHERE u.state = 'new' AND u.k NOT IN (SELECT made.partition_key FROM made);
  RETURN v_missed;
EXCEPTION WHEN lock_not_available THEN
  SELECT pg_catalog.array_agg(u.k) INTO v_missed
  FROM unnest(p_keys, p_states) AS u(k, state) WHERE u.state = 'new';
  RETURN v_missed;
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
