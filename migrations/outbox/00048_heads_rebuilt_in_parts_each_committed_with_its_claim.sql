-- +goose Up
-- +goose StatementBegin
-- Where a rebuild of a queue's partition heads stopped (outbox._restore_heads rebuilds in parts,
-- each committed with its claim). UNLOGGED with the heads: a crash empties both, and the rebuild
-- starts over.
CREATE UNLOGGED TABLE outbox.partition_heads_restored (
  queue_id integer CONSTRAINT partition_heads_restored_pkey PRIMARY KEY,
  after_key text NOT NULL
);
COMMENT ON TABLE outbox.partition_heads_restored IS
  'Partitioned queues whose partition_heads are being rebuilt: the last key done so far (internal; emptied by crash recovery).';
-- +goose StatementEnd

-- +goose StatementBegin
-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables, or recomputes them (_rebuild_heads): every partition with
-- pending rows gets its head again, searched from its floor: 0 for every head made since the crash
-- (the heads were not built, outbox._make_heads), or one a search from 0 raised since; callers
-- that recompute them (_rebuild_heads) set the floors to 0 first.
-- One part per call: keys in their order, from where the last part stopped (unlogged, as the
-- heads: a crash starts over), 500 at a time until 50 ms have passed; the part that finds no key
-- left marks the heads built. Each part commits with the claim that made it, so a deep
-- backlog is rebuilt by many short claims: in one statement, 4.3 million pending rows over 2.1
-- million keys took 26 s, longer than a drainer's ClaimTimeout, and a claim cut off rolled it all
-- back, every time (invariant 9). Meanwhile claims take what the heads there are offer: each is
-- checked against the FIFO rule from its floor, so a partial set is only incomplete, and producers
-- give new keys floor 0 until the heads are built (outbox._make_heads).
-- Heads producers made since then are kept (upsert). One part at a time per queue: a claim tries
-- the queue's rebuild lock (outbox._claim; concurrent claims do not wait for it), other callers
-- (_rebuild_heads) wait. A part NOTIFYs the queue's channel: drainers whose claims found the heads
-- incomplete meanwhile claim again at its commit, and so make the next part.
CREATE OR REPLACE FUNCTION outbox._restore_heads(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
  v_started constant timestamptz := pg_catalog.clock_timestamp();
  v_after text;
  v_keys text[];
  v_any boolean := false;
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -1);
  IF EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    RETURN;
  END IF;
  SELECT r.after_key INTO v_after FROM outbox.partition_heads_restored r WHERE r.queue_id = p_q.queue_id;
  LOOP
    -- The next keys with unsent rows (poisoned-only keys too: their refresh finds no head), one
    -- index probe each, in the column's own type and order.
    EXECUTE pg_catalog.format(
      'WITH RECURSIVE keys(k) AS (
         (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL %4$s ORDER BY t.%2$I LIMIT 1)
         UNION ALL
         SELECT (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL AND t.%2$I > keys.k ORDER BY t.%2$I LIMIT 1)
         FROM keys WHERE keys.k IS NOT NULL)
       SELECT pg_catalog.array_agg(s.k::text) FROM (SELECT keys.k FROM keys WHERE keys.k IS NOT NULL LIMIT 500) s',
      p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type,
      CASE WHEN v_after IS NOT NULL THEN pg_catalog.format('AND t.%I > $1::%s', p_q.partition_column, p_q.partition_type) END)
      INTO v_keys USING v_after;
    IF v_keys IS NULL THEN
      DELETE FROM outbox.partition_heads_restored r WHERE r.queue_id = p_q.queue_id;
      INSERT INTO outbox.partition_heads_built (queue_id) VALUES (p_q.queue_id) ON CONFLICT DO NOTHING;
      EXIT;
    END IF;
    v_any := true;
    PERFORM outbox._refresh_heads(p_q, v_keys);
    v_after := v_keys[pg_catalog.array_length(v_keys, 1)];
    IF pg_catalog.clock_timestamp() - v_started > interval '50 milliseconds' THEN
      INSERT INTO outbox.partition_heads_restored AS r (queue_id, after_key) VALUES (p_q.queue_id, v_after)
      ON CONFLICT (queue_id) DO UPDATE SET after_key = excluded.after_key;
      EXIT;
    END IF;
  END LOOP;
  IF v_any AND pg_catalog.current_setting('pgdrain.notify', true) IS DISTINCT FROM 'off' THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Recomputes the partition heads of a queue from its pending rows (after adoption, after a change of
-- max_attempts made poisoned rows deliverable again, or after an operator changed rows by hand):
-- floors go back to 0 and every partition with a deliverable row gets its head pointed at it, the
-- same way heads come back after a crash (_restore_heads), here all parts in this transaction. Heads
-- are never deleted here: a producer in flight may own the only rows of a key, and its commit step
-- relies on the head it saw; heads left without rows are dropped by the next claim that looks at
-- them (under the producer lock).
CREATE OR REPLACE FUNCTION outbox._rebuild_heads(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  SELECT * INTO STRICT v_q FROM outbox.queues q WHERE q.queue_id = p_queue_id;
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_queue_id, -1);
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = p_queue_id;
  DELETE FROM outbox.partition_heads_restored r WHERE r.queue_id = p_queue_id;
  UPDATE outbox.partition_heads h SET floor_id = 0 WHERE h.queue_id = p_queue_id AND h.floor_id <> 0;
  WHILE NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_queue_id) LOOP
    PERFORM outbox._restore_heads(v_q);
  END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Points the head of each given partition at its first deliverable row (the smallest id at or above
-- the partition's floor among unsent, not poisoned rows), parked until that row's lease or backoff
-- ends; creates missing heads. The caller must have written its own changes in an earlier
-- statement, so they are visible here.
-- A partition found empty loses its head, and a partition whose head search stepped over poisoned
-- rows gets its floor raised past them, but only with the head locked FOR UPDATE (skip, never
-- wait) and after a second look with a newer snapshot: a producer committing rows of the
-- partition holds its head FOR KEY SHARE until it commits (outbox.tg_queue__commit), so its
-- rows never lose their head; one that finds the head locked by us leaves a wake note, applied by
-- a later claim. When the head is busy an empty head (head_id NULL) is parked for a second and
-- looked at again by a later claim.
-- A head whose version this transaction wrote (a lock-mode batch that moved it in an earlier call,
-- or made it) is not locked either: a producer's FOR KEY SHARE SKIP LOCKED, which does not conflict
-- with the move, follows the head's update chain to its newest version and waits, whatever SKIP
-- LOCKED says, for a FOR UPDATE lock or a deletion found there, until the batch ends (issue 29).
-- It is pointed at what we found like a busy one, but an empty one is not parked: the first claim
-- after our commit deletes it, or moves it to a row a producer committed meanwhile.
-- Only READ COMMITTED gives the second look a newer snapshot: under REPEATABLE READ or SERIALIZABLE
-- every key counts as busy, so a head is never deleted nor a floor raised from an old snapshot.
-- A head moved on to a row with every row below it (from the floor) sent takes that row's id as its
-- floor, in READ COMMITTED, without the lock: no row of the key below it can still come, since a
-- row committed after the row we found, which is committed, gets a larger id (commit order,
-- docs/ordering.md), so claims and refreshes walk no index entries of the key's sent rows again
-- (before, every head move and every claim walked all of them from the key's first row: the
-- dead ones too while an xmin is held). Only a floor still as we read it is raised: one lowered
-- meanwhile (a wake note, a producer's fix) stays.
CREATE OR REPLACE FUNCTION outbox._refresh_heads(p_q outbox.queues, p_keys text[])
RETURNS void
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
  -- Each key's first pending row from its floor, poisoned or not (f), and, only when that one is
  -- poisoned, its first deliverable row past it (p): the head goes to the first deliverable row (n),
  -- and the key is "tidy" (empty, or poisoned rows to step over: floor and deletion want the lock,
  -- below) exactly when there is none or f is poisoned. One index scan per key in the usual case
  -- (a look for pending rows below the next one cost a second, with a heap fetch of the row just sent).
  v_next constant text := pg_catalog.format(
    'SELECT k.key, n.id, n.attempt_count, fl.floor_id, fl.has_head, fh.xmin AS seen, fh.ctid AS head_tid,
            NULLIF(GREATEST(n.next_attempt_at, n.leased_until, $4), $4) AS parked,
            n.id IS NULL OR f.attempt_count >= $2 AS tidy
     FROM pg_catalog.unnest($1::text[]) AS k(key)
     -- A join, read once per key: as a scalar subquery in a pulled-up LATERAL the planner copied
     -- the lookup into each of its five uses (15 of 24 buffers per key in a drain).
     LEFT JOIN outbox.partition_heads fh ON fh.queue_id = $3 AND fh.partition_key = k.key
     CROSS JOIN LATERAL (
       SELECT COALESCE(fh.floor_id, 0) AS floor_id, fh.partition_key IS NOT NULL AS has_head) fl
     LEFT JOIN LATERAL (
       SELECT t.id, t.attempt_count, t.next_attempt_at, t.leased_until
       FROM %1$s t
       WHERE t.%2$I = k.key::%3$s AND t.sent_at IS NULL AND t.id >= fl.floor_id
       ORDER BY t.id LIMIT 1) f ON true
     LEFT JOIN LATERAL (
       SELECT t.id, t.attempt_count, t.next_attempt_at, t.leased_until
       FROM %1$s t
       WHERE f.attempt_count >= $2
         AND t.%2$I = k.key::%3$s AND t.sent_at IS NULL AND t.attempt_count < $2 AND t.id > f.id
       ORDER BY t.id LIMIT 1) p ON true
     CROSS JOIN LATERAL (
       SELECT CASE WHEN f.attempt_count < $2 THEN f.id ELSE p.id END AS id,
              CASE WHEN f.attempt_count < $2 THEN f.attempt_count ELSE p.attempt_count END AS attempt_count,
              CASE WHEN f.attempt_count < $2 THEN f.next_attempt_at ELSE p.next_attempt_at END AS next_attempt_at,
              CASE WHEN f.attempt_count < $2 THEN f.leased_until ELSE p.leased_until END AS leased_until) n',
    p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type);
  v_tidy text[];
  v_tidy_pass text[];
  v_keys text[] := p_keys;
  v_stale text[];
  v_locked text[];
  v_busy text[];
  -- Tidy keys whose head version this transaction wrote, from the xmin the pass read: a version
  -- of ours stays the newest until we end (no one else can write it meanwhile), and one of another
  -- transaction can not become ours, so no second read of the heads is needed.
  v_own text[];
  v_own_pass text[];
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  IF p_keys IS NULL OR pg_catalog.cardinality(p_keys) = 0 THEN
    RETURN;
  END IF;
  -- Point heads at their next row; partitions that are empty or stepped over poisoned rows are
  -- only collected here, so the common uncontended case writes each of them once, below.
  -- Heads that exist are updated in place, those that do not are made; but only a head still as
  -- this statement's snapshot saw it (its xmin), or still missing: another transaction that moved
  -- or made it meanwhile (a result of its row, an operator's poison_row, a producer's commit step)
  -- committed after our snapshot was taken, and what we found from that snapshot is older than
  -- what it wrote. Written over, the head went back to a row just sent, parked until that row's
  -- lease or backoff ended (up to max_delay), while the key's next row was ready and no claim
  -- looked at it. Such keys are looked at again, by a new statement with a newer snapshot (READ
  -- COMMITTED; in REPEATABLE READ and SERIALIZABLE the update fails with 40001 instead), a few
  -- times at most: what is left then is the other transaction's head, which a later claim, result
  -- or the repair pass moves on.
  -- Heads are updated (and deleted, below) at the ctid the statement read them at: a TID scan per
  -- key whatever the statistics say. Joined on the key, a plan the session made while the heads
  -- table was nearly empty (right after a crash, until autovacuum analyzed it again) read every
  -- head of the queue for each key: a rebuild part of 500 keys beside 14,500 heads took 316 ms,
  -- and longer as the heads grew.
  FOR pass IN 1..3 LOOP
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH next AS (%s),
       moved AS (
         UPDATE outbox.partition_heads h
         SET head_id = next.id, attempt_count = next.attempt_count, parked_until = next.parked,
             floor_id = CASE WHEN $5 AND h.floor_id >= next.floor_id THEN GREATEST(h.floor_id, next.id)
                             ELSE h.floor_id END
         FROM next
         WHERE next.id IS NOT NULL AND NOT next.tidy AND next.has_head
           AND h.ctid = next.head_tid AND h.xmin = next.seen
         RETURNING h.partition_key),
       made AS (
         INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
         SELECT $3, next.key, next.id, next.attempt_count, next.parked, CASE WHEN $5 THEN next.id ELSE 0 END
         FROM next WHERE next.id IS NOT NULL AND NOT next.tidy AND NOT next.has_head
         ON CONFLICT (queue_id, partition_key) DO NOTHING
         RETURNING h.partition_key)
       SELECT pg_catalog.array_agg(next.key ORDER BY next.key) FILTER (WHERE next.tidy),
              pg_catalog.array_agg(next.key ORDER BY next.key) FILTER (
                WHERE next.id IS NOT NULL AND NOT next.tidy
                  AND next.key NOT IN (SELECT moved.partition_key FROM moved)
                  AND next.key NOT IN (SELECT made.partition_key FROM made)),
              pg_catalog.array_agg(next.key) FILTER (
                WHERE $5 AND next.tidy AND next.has_head AND outbox._written_here(next.seen))
       FROM next', v_next),
      'text[], integer, integer, timestamptz, boolean',
      'TABLE(pgdrain_tidy text[], pgdrain_stale text[], pgdrain_own text[])')
      INTO v_tidy_pass, v_stale, v_own_pass USING v_keys, p_q.max_attempts, p_q.queue_id, v_now, v_read_committed;
    v_tidy := v_tidy || v_tidy_pass;
    v_own := v_own || v_own_pass;
    EXIT WHEN v_stale IS NULL OR NOT v_read_committed;
    v_keys := v_stale;
  END LOOP;
  IF v_tidy IS NULL THEN
    RETURN;
  END IF;

  IF v_read_committed THEN
    -- A partition with no head row has nothing a producer relies on (one that makes its head
    -- meanwhile waits for our insert, then leaves a wake note): it counts as locked.
    -- A locking probe per key (LATERAL), and a look for the head only where it failed (a scalar
    -- subquery): as OR NOT EXISTS, a plan made on a nearly empty heads table hashed every head of
    -- the queue on each call.
    SELECT pg_catalog.array_agg(u.k) INTO v_locked
    FROM pg_catalog.unnest(v_tidy) AS u(k)
    LEFT JOIN LATERAL (SELECT true AS held FROM outbox.partition_heads h
                       WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k
                         AND u.k <> ALL (COALESCE(v_own, '{}'))
                       FOR UPDATE SKIP LOCKED) l ON true
    WHERE l.held
       OR (SELECT h.partition_key FROM outbox.partition_heads h
           WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k) IS NULL;
  END IF;
  SELECT pg_catalog.array_agg(k) INTO v_busy
  FROM pg_catalog.unnest(v_tidy) AS k
  WHERE k <> ALL (COALESCE(v_locked, '{}'));

  -- Head busy (a producer is committing rows of the partition, or another claim holds it): point
  -- the head at what we found, the floor stays; an empty head is parked for a second and looked at
  -- again by a later claim (one of our own versions is not parked, see above).
  IF v_busy IS NOT NULL THEN
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH next AS (%s)
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, COALESCE(next.attempt_count, 0),
              CASE WHEN next.id IS NULL AND next.key <> ALL ($5) THEN $4 + interval ''1 second'' ELSE next.parked END
       FROM next WHERE next.id IS NOT NULL OR next.has_head
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until', v_next),
      'text[], integer, integer, timestamptz, text[]', 'void')
      USING v_busy, p_q.max_attempts, p_q.queue_id, v_now, COALESCE(v_own, '{}');
  END IF;
  IF v_locked IS NULL THEN
    RETURN;
  END IF;

  -- Under the exclusive lock, with a newer snapshot (rows committed before the lock are visible):
  -- delete empty heads, raise floors past poisoned rows.
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH next AS (%s),
     gone AS (
       DELETE FROM outbox.partition_heads h USING next
       WHERE next.id IS NULL AND h.ctid = next.head_tid)
     INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
     SELECT $3, next.key, next.id, next.attempt_count, next.parked, next.id
     FROM next WHERE next.id IS NOT NULL
     ON CONFLICT (queue_id, partition_key) DO UPDATE
       SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
           parked_until = EXCLUDED.parked_until, floor_id = EXCLUDED.floor_id', v_next),
    'text[], integer, integer, timestamptz', 'void')
    USING v_locked, p_q.max_attempts, p_q.queue_id, v_now;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark,
-- clocks, claim hints, statements with kept plans and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_q outbox.queues;
  v_rel regclass;
BEGIN
  -- Not outbox._queue: that refuses a registration whose table is gone, which is what this clears.
  SELECT * INTO v_q FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', fn, v_name
      USING ERRCODE = '42P01';
  END IF;
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  IF pg_catalog.pg_table_is_visible(v_q.table_oid) IS NOT NULL THEN
    v_rel := v_q.table_oid::regclass;
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_restored r WHERE r.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF v_rel IS NULL THEN
    NULL;
  ELSIF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_rel);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
  -- Its drainers' waiting mark (outbox._install_notify_trigger).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'drainer_waits_q' || v_q.queue_id);
  -- Its drainers' claim turn (outbox.claim_turn).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_turn_q' || v_q.queue_id);
  -- Its kept statements (outbox._prepared) and late-rows function (outbox._late_rows_function).
  PERFORM outbox._drop_functions('^_q' || v_q.queue_id || '_');
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

-- +goose Down

-- +goose StatementBegin
-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables, or recomputes them (_rebuild_heads): every partition with
-- pending rows gets its head again, searched from floor 0.
-- Heads producers made since then are kept (upsert). Runs once per queue: the first claim takes
-- the queue's rebuild lock, looks again, and rebuilds; concurrent claims do not wait for it
-- (outbox._claim tries the lock), other callers (_rebuild_heads) do. A rebuild NOTIFYs the queue's
-- channel: drainers whose claims found the heads incomplete meanwhile claim again at its commit.
CREATE OR REPLACE FUNCTION outbox._restore_heads(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_keys text[];
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -1);
  IF EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    RETURN;
  END IF;
  -- Keys with deliverable rows, and keys that have a head (a rebuild keeps heads: the search from
  -- floor 0 below repoints or, under the producer lock, drops them).
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k) FROM (
       SELECT %I::text AS k FROM %s WHERE sent_at IS NULL AND attempt_count < $1
       UNION
       SELECT h.partition_key FROM outbox.partition_heads h WHERE h.queue_id = $2) s',
    p_q.partition_column, p_q.table_oid::regclass)
    INTO v_keys USING p_q.max_attempts, p_q.queue_id;
  UPDATE outbox.partition_heads h SET floor_id = 0 WHERE h.queue_id = p_q.queue_id;
  PERFORM outbox._refresh_heads(p_q, v_keys);
  INSERT INTO outbox.partition_heads_built (queue_id) VALUES (p_q.queue_id) ON CONFLICT DO NOTHING;
  IF v_keys IS NOT NULL AND pg_catalog.current_setting('pgdrain.notify', true) IS DISTINCT FROM 'off' THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Recomputes the partition heads of a queue from its pending rows (after adoption, after a change of
-- max_attempts made poisoned rows deliverable again, or after an operator changed rows by hand):
-- floors go back to 0 and every partition with a deliverable row gets its head pointed at it, the
-- same way heads come back after a crash (_restore_heads). Heads are never deleted here: a producer
-- in flight may own the only rows of a key, and its commit step relies on the head it saw; heads
-- left without rows are dropped by the next claim that looks at them (under the producer lock).
CREATE OR REPLACE FUNCTION outbox._rebuild_heads(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  SELECT * INTO STRICT v_q FROM outbox.queues q WHERE q.queue_id = p_queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = p_queue_id;
  PERFORM outbox._restore_heads(v_q);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Points the head of each given partition at its first deliverable row (the smallest id at or above
-- the partition's floor among unsent, not poisoned rows), parked until that row's lease or backoff
-- ends; creates missing heads. The caller must have written its own changes in an earlier
-- statement, so they are visible here.
-- A partition found empty loses its head, and a partition whose head search stepped over poisoned
-- rows gets its floor raised past them, but only with the head locked FOR UPDATE (skip, never
-- wait) and after a second look with a newer snapshot: a producer committing rows of the
-- partition holds its head FOR KEY SHARE until it commits (outbox.tg_queue__commit), so its
-- rows never lose their head; one that finds the head locked by us leaves a wake note, applied by
-- a later claim. When the head is busy an empty head (head_id NULL) is parked for a second and
-- looked at again by a later claim.
-- A head whose version this transaction wrote (a lock-mode batch that moved it in an earlier call,
-- or made it) is not locked either: a producer's FOR KEY SHARE SKIP LOCKED, which does not conflict
-- with the move, follows the head's update chain to its newest version and waits, whatever SKIP
-- LOCKED says, for a FOR UPDATE lock or a deletion found there, until the batch ends (issue 29).
-- It is pointed at what we found like a busy one, but an empty one is not parked: the first claim
-- after our commit deletes it, or moves it to a row a producer committed meanwhile.
-- Only READ COMMITTED gives the second look a newer snapshot: under REPEATABLE READ or SERIALIZABLE
-- every key counts as busy, so a head is never deleted nor a floor raised from an old snapshot.
-- A head moved on to a row with every row below it (from the floor) sent takes that row's id as its
-- floor, in READ COMMITTED, without the lock: no row of the key below it can still come, since a
-- row committed after the row we found, which is committed, gets a larger id (commit order,
-- docs/ordering.md), so claims and refreshes walk no index entries of the key's sent rows again
-- (before, every head move and every claim walked all of them from the key's first row: the
-- dead ones too while an xmin is held). Only a floor still as we read it is raised: one lowered
-- meanwhile (a wake note, a producer's fix) stays.
CREATE OR REPLACE FUNCTION outbox._refresh_heads(p_q outbox.queues, p_keys text[])
RETURNS void
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
  -- Each key's first pending row from its floor, poisoned or not (f), and, only when that one is
  -- poisoned, its first deliverable row past it (p): the head goes to the first deliverable row (n),
  -- and the key is "tidy" (empty, or poisoned rows to step over: floor and deletion want the lock,
  -- below) exactly when there is none or f is poisoned. One index scan per key in the usual case
  -- (a look for pending rows below the next one cost a second, with a heap fetch of the row just sent).
  v_next constant text := pg_catalog.format(
    'SELECT k.key, n.id, n.attempt_count, fl.floor_id, fl.has_head, fh.xmin AS seen,
            NULLIF(GREATEST(n.next_attempt_at, n.leased_until, $4), $4) AS parked,
            n.id IS NULL OR f.attempt_count >= $2 AS tidy
     FROM pg_catalog.unnest($1::text[]) AS k(key)
     -- A join, read once per key: as a scalar subquery in a pulled-up LATERAL the planner copied
     -- the lookup into each of its five uses (15 of 24 buffers per key in a drain).
     LEFT JOIN outbox.partition_heads fh ON fh.queue_id = $3 AND fh.partition_key = k.key
     CROSS JOIN LATERAL (
       SELECT COALESCE(fh.floor_id, 0) AS floor_id, fh.partition_key IS NOT NULL AS has_head) fl
     LEFT JOIN LATERAL (
       SELECT t.id, t.attempt_count, t.next_attempt_at, t.leased_until
       FROM %1$s t
       WHERE t.%2$I = k.key::%3$s AND t.sent_at IS NULL AND t.id >= fl.floor_id
       ORDER BY t.id LIMIT 1) f ON true
     LEFT JOIN LATERAL (
       SELECT t.id, t.attempt_count, t.next_attempt_at, t.leased_until
       FROM %1$s t
       WHERE f.attempt_count >= $2
         AND t.%2$I = k.key::%3$s AND t.sent_at IS NULL AND t.attempt_count < $2 AND t.id > f.id
       ORDER BY t.id LIMIT 1) p ON true
     CROSS JOIN LATERAL (
       SELECT CASE WHEN f.attempt_count < $2 THEN f.id ELSE p.id END AS id,
              CASE WHEN f.attempt_count < $2 THEN f.attempt_count ELSE p.attempt_count END AS attempt_count,
              CASE WHEN f.attempt_count < $2 THEN f.next_attempt_at ELSE p.next_attempt_at END AS next_attempt_at,
              CASE WHEN f.attempt_count < $2 THEN f.leased_until ELSE p.leased_until END AS leased_until) n',
    p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type);
  v_tidy text[];
  v_tidy_pass text[];
  v_keys text[] := p_keys;
  v_stale text[];
  v_locked text[];
  v_busy text[];
  -- Tidy keys whose head version this transaction wrote, from the xmin the pass read: a version
  -- of ours stays the newest until we end (no one else can write it meanwhile), and one of another
  -- transaction can not become ours, so no second read of the heads is needed.
  v_own text[];
  v_own_pass text[];
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  IF p_keys IS NULL OR pg_catalog.cardinality(p_keys) = 0 THEN
    RETURN;
  END IF;
  -- Point heads at their next row; partitions that are empty or stepped over poisoned rows are
  -- only collected here, so the common uncontended case writes each of them once, below.
  -- Heads that exist are updated in place, those that do not are made; but only a head still as
  -- this statement's snapshot saw it (its xmin), or still missing: another transaction that moved
  -- or made it meanwhile (a result of its row, an operator's poison_row, a producer's commit step)
  -- committed after our snapshot was taken, and what we found from that snapshot is older than
  -- what it wrote. Written over, the head went back to a row just sent, parked until that row's
  -- lease or backoff ended (up to max_delay), while the key's next row was ready and no claim
  -- looked at it. Such keys are looked at again, by a new statement with a newer snapshot (READ
  -- COMMITTED; in REPEATABLE READ and SERIALIZABLE the update fails with 40001 instead), a few
  -- times at most: what is left then is the other transaction's head, which a later claim, result
  -- or the repair pass moves on.
  FOR pass IN 1..3 LOOP
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH next AS (%s),
       moved AS (
         UPDATE outbox.partition_heads h
         SET head_id = next.id, attempt_count = next.attempt_count, parked_until = next.parked,
             floor_id = CASE WHEN $5 AND h.floor_id >= next.floor_id THEN GREATEST(h.floor_id, next.id)
                             ELSE h.floor_id END
         FROM next
         WHERE next.id IS NOT NULL AND NOT next.tidy AND next.has_head
           AND h.queue_id = $3 AND h.partition_key = next.key AND h.xmin = next.seen
         RETURNING h.partition_key),
       made AS (
         INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
         SELECT $3, next.key, next.id, next.attempt_count, next.parked, CASE WHEN $5 THEN next.id ELSE 0 END
         FROM next WHERE next.id IS NOT NULL AND NOT next.tidy AND NOT next.has_head
         ON CONFLICT (queue_id, partition_key) DO NOTHING
         RETURNING h.partition_key)
       SELECT pg_catalog.array_agg(next.key ORDER BY next.key) FILTER (WHERE next.tidy),
              pg_catalog.array_agg(next.key ORDER BY next.key) FILTER (
                WHERE next.id IS NOT NULL AND NOT next.tidy
                  AND next.key NOT IN (SELECT moved.partition_key FROM moved)
                  AND next.key NOT IN (SELECT made.partition_key FROM made)),
              pg_catalog.array_agg(next.key) FILTER (
                WHERE $5 AND next.tidy AND next.has_head AND outbox._written_here(next.seen))
       FROM next', v_next),
      'text[], integer, integer, timestamptz, boolean',
      'TABLE(pgdrain_tidy text[], pgdrain_stale text[], pgdrain_own text[])')
      INTO v_tidy_pass, v_stale, v_own_pass USING v_keys, p_q.max_attempts, p_q.queue_id, v_now, v_read_committed;
    v_tidy := v_tidy || v_tidy_pass;
    v_own := v_own || v_own_pass;
    EXIT WHEN v_stale IS NULL OR NOT v_read_committed;
    v_keys := v_stale;
  END LOOP;
  IF v_tidy IS NULL THEN
    RETURN;
  END IF;

  IF v_read_committed THEN
    -- A partition with no head row has nothing a producer relies on (one that makes its head
    -- meanwhile waits for our insert, then leaves a wake note): it counts as locked.
    SELECT pg_catalog.array_agg(k) INTO v_locked
    FROM pg_catalog.unnest(v_tidy) AS k
    WHERE k IN (SELECT h.partition_key FROM outbox.partition_heads h
                WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_tidy)
                  AND h.partition_key <> ALL (COALESCE(v_own, '{}'))
                FOR UPDATE SKIP LOCKED)
       OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads h
                      WHERE h.queue_id = p_q.queue_id AND h.partition_key = k);
  END IF;
  SELECT pg_catalog.array_agg(k) INTO v_busy
  FROM pg_catalog.unnest(v_tidy) AS k
  WHERE k <> ALL (COALESCE(v_locked, '{}'));

  -- Head busy (a producer is committing rows of the partition, or another claim holds it): point
  -- the head at what we found, the floor stays; an empty head is parked for a second and looked at
  -- again by a later claim (one of our own versions is not parked, see above).
  IF v_busy IS NOT NULL THEN
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH next AS (%s)
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, COALESCE(next.attempt_count, 0),
              CASE WHEN next.id IS NULL AND next.key <> ALL ($5) THEN $4 + interval ''1 second'' ELSE next.parked END
       FROM next WHERE next.id IS NOT NULL OR next.has_head
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until', v_next),
      'text[], integer, integer, timestamptz, text[]', 'void')
      USING v_busy, p_q.max_attempts, p_q.queue_id, v_now, COALESCE(v_own, '{}');
  END IF;
  IF v_locked IS NULL THEN
    RETURN;
  END IF;

  -- Under the exclusive lock, with a newer snapshot (rows committed before the lock are visible):
  -- delete empty heads, raise floors past poisoned rows.
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH next AS (%s),
     gone AS (
       DELETE FROM outbox.partition_heads h USING next
       WHERE next.id IS NULL AND h.queue_id = $3 AND h.partition_key = next.key)
     INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
     SELECT $3, next.key, next.id, next.attempt_count, next.parked, next.id
     FROM next WHERE next.id IS NOT NULL
     ON CONFLICT (queue_id, partition_key) DO UPDATE
       SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
           parked_until = EXCLUDED.parked_until, floor_id = EXCLUDED.floor_id', v_next),
    'text[], integer, integer, timestamptz', 'void')
    USING v_locked, p_q.max_attempts, p_q.queue_id, v_now;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark,
-- clocks, claim hints, statements with kept plans and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_q outbox.queues;
  v_rel regclass;
BEGIN
  -- Not outbox._queue: that refuses a registration whose table is gone, which is what this clears.
  SELECT * INTO v_q FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', fn, v_name
      USING ERRCODE = '42P01';
  END IF;
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  IF pg_catalog.pg_table_is_visible(v_q.table_oid) IS NOT NULL THEN
    v_rel := v_q.table_oid::regclass;
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF v_rel IS NULL THEN
    NULL;
  ELSIF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_rel);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
  -- Its drainers' waiting mark (outbox._install_notify_trigger).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'drainer_waits_q' || v_q.queue_id);
  -- Its drainers' claim turn (outbox.claim_turn).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_turn_q' || v_q.queue_id);
  -- Its kept statements (outbox._prepared) and late-rows function (outbox._late_rows_function).
  PERFORM outbox._drop_functions('^_q' || v_q.queue_id || '_');
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
  SELECT '0.1.0'::text, 47;
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

-- +goose StatementBegin
DROP TABLE outbox.partition_heads_restored;
-- +goose StatementEnd
