-- +goose Up
-- +goose StatementBegin
-- The statement to EXECUTE for p_sql, a statement of queue p_queue_id built with format() whose
-- parameters $1..$n have the types p_args (comma-separated, in order): a call of a function whose
-- body is p_sql as static SQL, so its plan is made once per session instead of on every EXECUTE
-- (planning the claim, record and refresh statements cost as much as running them); p_sql itself
-- when no such function can be had. Both take the same parameters, so the caller's USING list
-- serves either. p_returns is the function's result: 'void', or 'TABLE(...)' whose columns the
-- statement's columns match exactly.
--
-- The function is named for what it runs (queue id and a hash of p_args, p_returns and p_sql): a
-- statement that changes (a new migration, a queue registered again with another table or column)
-- finds no function of that name and makes its own, and one that was dropped is made again, so
-- there is no state to drift. It is made by the first call that needs it, as the caller's
-- current user (the schema owner: the callers are SECURITY DEFINER), executable by nobody else,
-- under a try-lock: a session that does not get the lock, may not create functions in outbox, or
-- runs a read-only transaction (a standby) runs p_sql this once.
-- drop_queue drops a queue's functions.
CREATE OR REPLACE FUNCTION outbox._prepared(p_queue_id integer, p_sql text, p_args text, p_returns text)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  -- md5 and to_regproc (a name, no argument types to parse): this runs before every statement.
  v_name constant text := '_q' || p_queue_id || '_' || pg_catalog.left(
    pg_catalog.md5(p_args || '|' || p_returns || '|' || p_sql), 24);
  v_signature text;
  v_fn regproc := pg_catalog.to_regproc(pg_catalog.format('outbox.%I', v_name));
  v_params text := '';
BEGIN
  FOR n IN 1..pg_catalog.length(p_args) - pg_catalog.length(pg_catalog.replace(p_args, ',', '')) + 1 LOOP
    v_params := v_params || CASE WHEN n > 1 THEN ', $' ELSE '$' END || n;
  END LOOP;
  IF p_args = '' THEN
    v_params := '';
  END IF;
  IF v_fn IS NULL THEN
    IF pg_catalog.current_setting('transaction_read_only') = 'on'
       OR NOT pg_catalog.has_schema_privilege('outbox', 'CREATE')
       OR NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name)) THEN
      RETURN p_sql;
    END IF;
    v_signature := pg_catalog.format('outbox.%I(%s)', v_name, p_args);
    -- Making it must never fail the caller: another session may have made it since the lookup
    -- above (and this session's catalog cache may not know yet), or an event trigger may refuse
    -- DDL. Any of these only means running p_sql this once (the subtransaction is paid only here).
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE FUNCTION outbox.%I(%s) RETURNS %s LANGUAGE plpgsql VOLATILE SET search_path = '''' AS %L',
        v_name, p_args, p_returns,
        CASE WHEN p_returns = 'void' THEN 'BEGIN ' || p_sql || '; END'
             ELSE 'BEGIN RETURN QUERY ' || p_sql || '; END' END);
      EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', v_signature);
      EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', v_signature,
        'pgdrain: one statement of queue ' || p_queue_id || ' with its plan kept (outbox._prepared; internal)');
    EXCEPTION WHEN OTHERS THEN
      RETURN p_sql;
    END;
    v_fn := pg_catalog.to_regproc(pg_catalog.format('outbox.%I', v_name));
  END IF;
  IF NOT pg_catalog.has_function_privilege(v_fn, 'EXECUTE') THEN
    RETURN p_sql;
  END IF;
  RETURN CASE WHEN p_returns = 'void' THEN pg_catalog.format('SELECT outbox.%I(%s)', v_name, v_params)
              ELSE pg_catalog.format('SELECT * FROM outbox.%I(%s)', v_name, v_params) END;
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
-- Records outcomes for rows, the common core of apply_result(s) (p_tokens given: only rows whose
-- lease_token still matches) and settle_locked (p_tokens NULL: the caller checked it holds the
-- row locks). A row that does not qualify is not touched at all. Every outcome clears lease and
-- token together. 'transient' adds an attempt with backoff; on a partitioned queue it is capped
-- at max_attempts - 1 so a partition head is never poisoned by a transient failure. 'permanent'
-- poisons (attempt_count = max_attempts) unless the queue's policy is 'retry'.
-- A backoff is counted from the clock when the outcome is recorded, not from now() (the
-- transaction start): in lock mode the claiming transaction has been open for the whole delivery,
-- and a backoff counted from its start could be over before it is written. sent_at is a record,
-- not a deadline: it stays now(), the time of the transaction that made the row sent.
-- p_retry_at (NULL, or aligned with p_ids; NULL elements = backoff) sets a transient row's next
-- attempt to a time the caller chose (a peer's Retry-After), never earlier than the clock.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[], p_retry_at timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_done bigint[];
  v_keys text[];
  v_cap integer := CASE WHEN p_q.partition_column IS NULL THEN p_q.max_attempts ELSE p_q.max_attempts - 1 END;
  v_clock timestamptz := pg_catalog.clock_timestamp();
BEGIN
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH input AS (
       SELECT u.id, u.token, u.outcome, u.err, u.retry_at
       FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $11::timestamptz[])
         AS u(id, token, outcome, err, retry_at)),
     decided AS (
       SELECT i.*, CASE
                WHEN i.outcome = ''sent'' THEN NULL
                WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
                -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts
                -- while it was leased stays poisoned.
                ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END AS attempts
       FROM input i JOIN %1$s t ON t.id = i.id),
     upd AS (
       UPDATE %1$s t SET
         sent_at = CASE WHEN d.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = COALESCE(d.attempts, t.attempt_count),
         next_attempt_at = CASE
           WHEN d.outcome = ''sent'' THEN t.next_attempt_at
           WHEN d.attempts >= $6 THEN NULL
           WHEN d.retry_at IS NOT NULL THEN GREATEST(d.retry_at, $10)
           ELSE $10 + outbox._backoff(d.attempts, $8, $9) END,
         last_error = CASE WHEN d.outcome = ''sent'' THEN t.last_error ELSE d.err END,
         leased_until = NULL,
         lease_token = NULL
       FROM decided d
       WHERE t.id = d.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = d.token)
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END),
    'bigint[], uuid[], text[], text[], text, integer, integer, interval, interval, timestamptz, timestamptz[]',
    'TABLE(pgdrain_ids bigint[], pgdrain_keys text[])')
    INTO v_done, v_keys
    USING p_ids, p_tokens, p_outcomes, p_errors, p_q.permanent_policy, p_q.max_attempts, v_cap,
          p_q.backoff_min, p_q.backoff_max, v_clock, p_retry_at;

  IF p_q.partition_column IS NOT NULL AND v_keys IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  RETURN COALESCE(v_done, '{}');
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
-- partition holds its head FOR KEY SHARE until it commits (outbox._commit_partitions), so its
-- rows never lose their head; one that finds the head locked by us leaves a wake note, applied by
-- a later claim. When the head is busy an empty head (head_id NULL) is parked for a second and
-- looked at again by a later claim.
-- Only READ COMMITTED gives the second look a newer snapshot: under REPEATABLE READ or SERIALIZABLE
-- every key counts as busy, so a head is never deleted nor a floor raised from an old snapshot.
CREATE OR REPLACE FUNCTION outbox._refresh_heads(p_q outbox.queues, p_keys text[])
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
  v_next constant text := pg_catalog.format(
    'SELECT k.key, n.id, n.attempt_count, fl.floor_id, fl.has_head,
            NULLIF(GREATEST(n.next_attempt_at, n.leased_until, $4), $4) AS parked,
            n.id IS NULL OR n.id > fl.floor_id AND EXISTS (
              SELECT 1 FROM %1$s s WHERE s.%2$I = k.key::%3$s AND s.sent_at IS NULL
                AND s.id >= fl.floor_id AND s.id < n.id) AS tidy
     FROM pg_catalog.unnest($1::text[]) AS k(key)
     CROSS JOIN LATERAL (
       SELECT COALESCE(x.floor_id, 0) AS floor_id, x.floor_id IS NOT NULL AS has_head
       FROM (SELECT (SELECT h.floor_id FROM outbox.partition_heads h
                     WHERE h.queue_id = $3 AND h.partition_key = k.key) AS floor_id) x) fl
     LEFT JOIN LATERAL (
       SELECT t.id, t.attempt_count, t.next_attempt_at, t.leased_until
       FROM %1$s t
       WHERE t.%2$I = k.key::%3$s AND t.sent_at IS NULL AND t.attempt_count < $2 AND t.id >= fl.floor_id
       ORDER BY t.id LIMIT 1) n ON true',
    p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type);
  v_tidy text[];
  v_locked text[];
  v_busy text[];
  v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
  IF p_keys IS NULL OR pg_catalog.cardinality(p_keys) = 0 THEN
    RETURN;
  END IF;
  -- Point heads at their next row; partitions that are empty or stepped over poisoned rows are
  -- only collected here, so the common uncontended case writes each of them once, below.
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH next AS (%s),
     upd AS (
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, next.attempt_count, next.parked
       FROM next WHERE next.id IS NOT NULL AND NOT next.tidy
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until)
     SELECT pg_catalog.array_agg(next.key ORDER BY next.key) FROM next WHERE next.tidy', v_next),
    'text[], integer, integer, timestamptz', 'TABLE(pgdrain_tidy text[])')
    INTO v_tidy USING p_keys, p_q.max_attempts, p_q.queue_id, v_now;
  IF v_tidy IS NULL THEN
    RETURN;
  END IF;

  IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
    -- A partition with no head row has nothing a producer relies on (one that makes its head
    -- meanwhile waits for our insert, then leaves a wake note): it counts as locked.
    SELECT pg_catalog.array_agg(k) INTO v_locked
    FROM pg_catalog.unnest(v_tidy) AS k
    WHERE k IN (SELECT h.partition_key FROM outbox.partition_heads h
                WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_tidy)
                FOR UPDATE SKIP LOCKED)
       OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads h
                      WHERE h.queue_id = p_q.queue_id AND h.partition_key = k);
  END IF;
  SELECT pg_catalog.array_agg(k) INTO v_busy
  FROM pg_catalog.unnest(v_tidy) AS k
  WHERE k <> ALL (COALESCE(v_locked, '{}'));

  -- Head busy (a producer is committing rows of the partition, or another claim holds it): point
  -- the head at what we found, the floor stays; an empty head is parked for a second and looked at
  -- again by a later claim.
  IF v_busy IS NOT NULL THEN
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH next AS (%s)
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, COALESCE(next.attempt_count, 0),
              CASE WHEN next.id IS NULL THEN $4 + interval ''1 second'' ELSE next.parked END
       FROM next WHERE next.id IS NOT NULL OR next.has_head
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until', v_next),
      'text[], integer, integer, timestamptz', 'void')
      USING v_busy, p_q.max_attempts, p_q.queue_id, v_now;
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
-- Lease mode: leases up to batch_size deliverable rows for `lease`, each with its own fresh
-- lease_token, in one short transaction. Results come back through apply_result(s) and count only
-- while the token still matches. Order: attempt_count, id (fresh rows overtake retried ones).
-- Due times and leases are read from the clock at the claim, not now(): in a transaction that
-- began long ago now() would hand out a lease that is already over.
CREATE OR REPLACE FUNCTION outbox.claim_batch(queue text, batch_size integer DEFAULT 32, lease interval DEFAULT '30 seconds')
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
  fn constant text := 'claim_batch';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_clock timestamptz;
  -- The rows both statements return, as outbox._prepared's function declares them.
  v_rows constant text := 'TABLE(pgdrain_id bigint, pgdrain_event_type text, pgdrain_payload jsonb, '
    'pgdrain_partition_key text, pgdrain_attempt_count integer, pgdrain_lease_token uuid, '
    'pgdrain_leased_until timestamptz, pgdrain_created_at timestamptz, pgdrain_event_id uuid, pgdrain_headers jsonb)';
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  PERFORM outbox._check_lease(fn, lease);
  IF v_q.partition_column IS NULL THEN
    -- One statement: pick, lease and return (one call, one plan kept by outbox._prepared).
    -- One clock reading for the whole statement: a row is due and leased at the same instant.
    v_clock := pg_catalog.clock_timestamp();
    RETURN QUERY EXECUTE outbox._prepared(v_q.queue_id, pg_catalog.format(
      'WITH leased AS (
         UPDATE %1$s t SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $4 + $3
         WHERE t.id = ANY (ARRAY(
           SELECT s.id FROM %1$s s
           WHERE s.sent_at IS NULL AND s.attempt_count < $2
             AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= $4)
             AND (s.leased_until IS NULL OR s.leased_until <= $4)
           ORDER BY s.attempt_count, s.id LIMIT $1
           FOR UPDATE SKIP LOCKED))
         RETURNING t.id, t.event_type, t.payload, NULL::text, t.attempt_count, t.lease_token, t.leased_until,
                   t.created_at, %2$s, t.headers)
       SELECT * FROM leased ORDER BY 5, 1', v_q.table_oid::regclass, outbox._event_id_of(v_q)),
      'integer, integer, interval, timestamptz', v_rows)
      USING batch_size, v_q.max_attempts, lease, v_clock;
    RETURN;
  END IF;
  v_ids := outbox._claim(v_q, batch_size, lease, 'lease');
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    -- id = ANY('{}') is constant false, which "implies" any partial index's predicate: the planner
    -- would then walk the claim index end to end to return nothing.
    RETURN;
  END IF;
  RETURN QUERY EXECUTE outbox._prepared(v_q.queue_id, pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.lease_token, t.leased_until, t.created_at,
            %s, t.headers
     FROM %s t WHERE t.id = ANY ($1) ORDER BY t.attempt_count, t.id',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    outbox._event_id_of(v_q), v_q.table_oid::regclass),
    'bigint[]', v_rows)
    USING v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lock mode (seed 001's claim transaction): the same deliverable rows as claim_batch, locked
-- FOR UPDATE SKIP LOCKED by the caller's open transaction until it ends. No lease is written: the
-- row lock is the fence, and settle_locked records outcomes in the same transaction, so each row
-- is written once. The claimed ids are remembered in a transaction-local setting for settle_locked.
CREATE OR REPLACE FUNCTION outbox.claim_locked(queue text, batch_size integer DEFAULT 32)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'claim_locked';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_setting text;
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  -- _claim leaves out the rows this transaction already holds (SKIP LOCKED does not skip our own
  -- locks), so a row is never handed out twice.
  v_ids := outbox._claim(v_q, batch_size, NULL, 'lock');
  v_setting := 'pgdrain.held_' || v_q.queue_id;
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    RETURN;  -- not even a query: id = ANY('{}') would let the planner pick any partial index
  END IF;
  PERFORM pg_catalog.set_config(v_setting,
    pg_catalog.concat_ws(',', NULLIF(pg_catalog.current_setting(v_setting, true), ''),
                         pg_catalog.array_to_string(v_ids, ',')), true);
  RETURN QUERY EXECUTE outbox._prepared(v_q.queue_id, pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.created_at, %s, t.headers
     FROM %s t WHERE t.id = ANY ($1) ORDER BY t.attempt_count, t.id',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    outbox._event_id_of(v_q), v_q.table_oid::regclass),
    'bigint[]', 'TABLE(pgdrain_id bigint, pgdrain_event_type text, pgdrain_payload jsonb, pgdrain_partition_key text, pgdrain_attempt_count integer, pgdrain_created_at timestamptz, pgdrain_event_id uuid, pgdrain_headers jsonb)')
    USING v_ids;
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
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark,
-- clocks, claim hints, statements with kept plans and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_q outbox.queues;
  v_rel regclass;
  v_fn regprocedure;
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
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
  -- Its statements with kept plans (outbox._prepared).
  FOR v_fn IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || v_q.queue_id || '\_%'
  LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_fn);
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
-- The statements with kept plans every queue made (outbox._prepared), and the function that made them.
DO $$
DECLARE
  v_fn regprocedure;
BEGIN
  FOR v_fn IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ '^_q[0-9]+_[0-9a-f]+$'
  LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_fn);
  END LOOP;
END;
$$;
DROP FUNCTION outbox._prepared(integer, text, text, text);
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
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s AND t.id <> ALL ($4)
         ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, pg_catalog.replace(v_due, '$now', '$3'))
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
      SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
             pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id)
        INTO v_keys, v_heads, v_floors, v_last_fresh
      FROM (SELECT h.partition_key, h.head_id, h.floor_id FROM outbox.partition_heads h
            WHERE h.queue_id = p_q.queue_id AND h.parked_until IS NULL
              AND h.attempt_count = 0 AND h.head_id > v_from_head
              AND h.head_id <> ALL (v_all || v_held) AND h.partition_key <> ALL (v_seen)
            ORDER BY h.attempt_count, h.head_id
            LIMIT v_remaining
            FOR NO KEY UPDATE SKIP LOCKED) s;
      -- Too few past the cursor: the next pass goes on from the front; otherwise past these heads
      -- (a head in flight is not walked again by every pass).
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_remaining THEN
        v_from_head := NULL;
      ELSE
        v_from_head := v_last_fresh;
      END IF;
    ELSE
      SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
             pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0),
             pg_catalog.bool_and(s.attempt_count = 0)
        INTO v_keys, v_heads, v_floors, v_last_fresh, v_only_fresh
      FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count FROM outbox.partition_heads h
            WHERE h.queue_id = p_q.queue_id AND h.parked_until IS NULL
              -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
              -- locks: without this a later pass would take them again.
              AND (h.head_id IS NULL OR h.head_id <> ALL (v_all || v_held))
              AND h.partition_key <> ALL (v_seen)
            ORDER BY h.attempt_count, h.head_id
            LIMIT v_remaining
            FOR NO KEY UPDATE SKIP LOCKED) s;
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
    EXECUTE pg_catalog.format(
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
           ELSE 'SELECT picked.id, picked.key FROM picked' END)
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
      EXECUTE pg_catalog.format(
        'SELECT pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NULL),
                pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NOT NULL)
         FROM unnest($1::bigint[], $2::text[]) AS c(id, key)
         LEFT JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%3$s AND t.sent_at IS NULL
           AND t.attempt_count < $4 AND t.leased_until > $5
           AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= t.leased_until)
         WHERE c.key = ANY ($3)',
        v_table, p_q.partition_column, p_q.partition_type)
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
-- Records outcomes for rows, the common core of apply_result(s) (p_tokens given: only rows whose
-- lease_token still matches) and settle_locked (p_tokens NULL: the caller checked it holds the
-- row locks). A row that does not qualify is not touched at all. Every outcome clears lease and
-- token together. 'transient' adds an attempt with backoff; on a partitioned queue it is capped
-- at max_attempts - 1 so a partition head is never poisoned by a transient failure. 'permanent'
-- poisons (attempt_count = max_attempts) unless the queue's policy is 'retry'.
-- A backoff is counted from the clock when the outcome is recorded, not from now() (the
-- transaction start): in lock mode the claiming transaction has been open for the whole delivery,
-- and a backoff counted from its start could be over before it is written. sent_at is a record,
-- not a deadline: it stays now(), the time of the transaction that made the row sent.
-- p_retry_at (NULL, or aligned with p_ids; NULL elements = backoff) sets a transient row's next
-- attempt to a time the caller chose (a peer's Retry-After), never earlier than the clock.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[], p_retry_at timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_done bigint[];
  v_keys text[];
  v_cap integer := CASE WHEN p_q.partition_column IS NULL THEN p_q.max_attempts ELSE p_q.max_attempts - 1 END;
  v_clock timestamptz := pg_catalog.clock_timestamp();
BEGIN
  EXECUTE pg_catalog.format(
    'WITH input AS (
       SELECT u.id, u.token, u.outcome, u.err, u.retry_at
       FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $11::timestamptz[])
         AS u(id, token, outcome, err, retry_at)),
     decided AS (
       SELECT i.*, CASE
                WHEN i.outcome = ''sent'' THEN NULL
                WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
                -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts
                -- while it was leased stays poisoned.
                ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END AS attempts
       FROM input i JOIN %1$s t ON t.id = i.id),
     upd AS (
       UPDATE %1$s t SET
         sent_at = CASE WHEN d.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = COALESCE(d.attempts, t.attempt_count),
         next_attempt_at = CASE
           WHEN d.outcome = ''sent'' THEN t.next_attempt_at
           WHEN d.attempts >= $6 THEN NULL
           WHEN d.retry_at IS NOT NULL THEN GREATEST(d.retry_at, $10)
           ELSE $10 + outbox._backoff(d.attempts, $8, $9) END,
         last_error = CASE WHEN d.outcome = ''sent'' THEN t.last_error ELSE d.err END,
         leased_until = NULL,
         lease_token = NULL
       FROM decided d
       WHERE t.id = d.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = d.token)
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END)
    INTO v_done, v_keys
    USING p_ids, p_tokens, p_outcomes, p_errors, p_q.permanent_policy, p_q.max_attempts, v_cap,
          p_q.backoff_min, p_q.backoff_max, v_clock, p_retry_at;

  IF p_q.partition_column IS NOT NULL AND v_keys IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  RETURN COALESCE(v_done, '{}');
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
-- partition holds its head FOR KEY SHARE until it commits (outbox._commit_partitions), so its
-- rows never lose their head; one that finds the head locked by us leaves a wake note, applied by
-- a later claim. When the head is busy an empty head (head_id NULL) is parked for a second and
-- looked at again by a later claim.
-- Only READ COMMITTED gives the second look a newer snapshot: under REPEATABLE READ or SERIALIZABLE
-- every key counts as busy, so a head is never deleted nor a floor raised from an old snapshot.
CREATE OR REPLACE FUNCTION outbox._refresh_heads(p_q outbox.queues, p_keys text[])
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
  v_next constant text := pg_catalog.format(
    'SELECT k.key, n.id, n.attempt_count, fl.floor_id, fl.has_head,
            NULLIF(GREATEST(n.next_attempt_at, n.leased_until, $4), $4) AS parked,
            n.id IS NULL OR n.id > fl.floor_id AND EXISTS (
              SELECT 1 FROM %1$s s WHERE s.%2$I = k.key::%3$s AND s.sent_at IS NULL
                AND s.id >= fl.floor_id AND s.id < n.id) AS tidy
     FROM pg_catalog.unnest($1::text[]) AS k(key)
     CROSS JOIN LATERAL (
       SELECT COALESCE(x.floor_id, 0) AS floor_id, x.floor_id IS NOT NULL AS has_head
       FROM (SELECT (SELECT h.floor_id FROM outbox.partition_heads h
                     WHERE h.queue_id = $3 AND h.partition_key = k.key) AS floor_id) x) fl
     LEFT JOIN LATERAL (
       SELECT t.id, t.attempt_count, t.next_attempt_at, t.leased_until
       FROM %1$s t
       WHERE t.%2$I = k.key::%3$s AND t.sent_at IS NULL AND t.attempt_count < $2 AND t.id >= fl.floor_id
       ORDER BY t.id LIMIT 1) n ON true',
    p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type);
  v_tidy text[];
  v_locked text[];
  v_busy text[];
  v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
  IF p_keys IS NULL OR pg_catalog.cardinality(p_keys) = 0 THEN
    RETURN;
  END IF;
  -- Point heads at their next row; partitions that are empty or stepped over poisoned rows are
  -- only collected here, so the common uncontended case writes each of them once, below.
  EXECUTE pg_catalog.format(
    'WITH next AS (%s),
     upd AS (
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, next.attempt_count, next.parked
       FROM next WHERE next.id IS NOT NULL AND NOT next.tidy
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until)
     SELECT pg_catalog.array_agg(next.key ORDER BY next.key) FROM next WHERE next.tidy', v_next)
    INTO v_tidy USING p_keys, p_q.max_attempts, p_q.queue_id, v_now;
  IF v_tidy IS NULL THEN
    RETURN;
  END IF;

  IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
    -- A partition with no head row has nothing a producer relies on (one that makes its head
    -- meanwhile waits for our insert, then leaves a wake note): it counts as locked.
    SELECT pg_catalog.array_agg(k) INTO v_locked
    FROM pg_catalog.unnest(v_tidy) AS k
    WHERE k IN (SELECT h.partition_key FROM outbox.partition_heads h
                WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_tidy)
                FOR UPDATE SKIP LOCKED)
       OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads h
                      WHERE h.queue_id = p_q.queue_id AND h.partition_key = k);
  END IF;
  SELECT pg_catalog.array_agg(k) INTO v_busy
  FROM pg_catalog.unnest(v_tidy) AS k
  WHERE k <> ALL (COALESCE(v_locked, '{}'));

  -- Head busy (a producer is committing rows of the partition, or another claim holds it): point
  -- the head at what we found, the floor stays; an empty head is parked for a second and looked at
  -- again by a later claim.
  IF v_busy IS NOT NULL THEN
    EXECUTE pg_catalog.format(
      'WITH next AS (%s)
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, COALESCE(next.attempt_count, 0),
              CASE WHEN next.id IS NULL THEN $4 + interval ''1 second'' ELSE next.parked END
       FROM next WHERE next.id IS NOT NULL OR next.has_head
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until', v_next)
      USING v_busy, p_q.max_attempts, p_q.queue_id, v_now;
  END IF;
  IF v_locked IS NULL THEN
    RETURN;
  END IF;

  -- Under the exclusive lock, with a newer snapshot (rows committed before the lock are visible):
  -- delete empty heads, raise floors past poisoned rows.
  EXECUTE pg_catalog.format(
    'WITH next AS (%s),
     gone AS (
       DELETE FROM outbox.partition_heads h USING next
       WHERE next.id IS NULL AND h.queue_id = $3 AND h.partition_key = next.key)
     INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
     SELECT $3, next.key, next.id, next.attempt_count, next.parked, next.id
     FROM next WHERE next.id IS NOT NULL
     ON CONFLICT (queue_id, partition_key) DO UPDATE
       SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
           parked_until = EXCLUDED.parked_until, floor_id = EXCLUDED.floor_id', v_next)
    USING v_locked, p_q.max_attempts, p_q.queue_id, v_now;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lease mode: leases up to batch_size deliverable rows for `lease`, each with its own fresh
-- lease_token, in one short transaction. Results come back through apply_result(s) and count only
-- while the token still matches. Order: attempt_count, id (fresh rows overtake retried ones).
-- Due times and leases are read from the clock at the claim, not now(): in a transaction that
-- began long ago now() would hand out a lease that is already over.
CREATE OR REPLACE FUNCTION outbox.claim_batch(queue text, batch_size integer DEFAULT 32, lease interval DEFAULT '30 seconds')
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
  fn constant text := 'claim_batch';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_clock timestamptz;
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  PERFORM outbox._check_lease(fn, lease);
  IF v_q.partition_column IS NULL THEN
    -- One statement: pick, lease and return (each EXECUTE is planned anew, so fewer is faster).
    -- One clock reading for the whole statement: a row is due and leased at the same instant.
    v_clock := pg_catalog.clock_timestamp();
    RETURN QUERY EXECUTE pg_catalog.format(
      'WITH leased AS (
         UPDATE %1$s t SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $4 + $3
         WHERE t.id = ANY (ARRAY(
           SELECT s.id FROM %1$s s
           WHERE s.sent_at IS NULL AND s.attempt_count < $2
             AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= $4)
             AND (s.leased_until IS NULL OR s.leased_until <= $4)
           ORDER BY s.attempt_count, s.id LIMIT $1
           FOR UPDATE SKIP LOCKED))
         RETURNING t.id, t.event_type, t.payload, NULL::text, t.attempt_count, t.lease_token, t.leased_until,
                   t.created_at, %2$s, t.headers)
       SELECT * FROM leased ORDER BY 5, 1', v_q.table_oid::regclass, outbox._event_id_of(v_q))
      USING batch_size, v_q.max_attempts, lease, v_clock;
    RETURN;
  END IF;
  v_ids := outbox._claim(v_q, batch_size, lease, 'lease');
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    -- id = ANY('{}') is constant false, which "implies" any partial index's predicate: the planner
    -- would then walk the claim index end to end to return nothing.
    RETURN;
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.lease_token, t.leased_until, t.created_at,
            %s, t.headers
     FROM %s t WHERE t.id = ANY ($1) ORDER BY t.attempt_count, t.id',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    outbox._event_id_of(v_q), v_q.table_oid::regclass)
    USING v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lock mode (seed 001's claim transaction): the same deliverable rows as claim_batch, locked
-- FOR UPDATE SKIP LOCKED by the caller's open transaction until it ends. No lease is written: the
-- row lock is the fence, and settle_locked records outcomes in the same transaction, so each row
-- is written once. The claimed ids are remembered in a transaction-local setting for settle_locked.
CREATE OR REPLACE FUNCTION outbox.claim_locked(queue text, batch_size integer DEFAULT 32)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'claim_locked';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_setting text;
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  -- _claim leaves out the rows this transaction already holds (SKIP LOCKED does not skip our own
  -- locks), so a row is never handed out twice.
  v_ids := outbox._claim(v_q, batch_size, NULL, 'lock');
  v_setting := 'pgdrain.held_' || v_q.queue_id;
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    RETURN;  -- not even a query: id = ANY('{}') would let the planner pick any partial index
  END IF;
  PERFORM pg_catalog.set_config(v_setting,
    pg_catalog.concat_ws(',', NULLIF(pg_catalog.current_setting(v_setting, true), ''),
                         pg_catalog.array_to_string(v_ids, ',')), true);
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.created_at, %s, t.headers
     FROM %s t WHERE t.id = ANY ($1) ORDER BY t.attempt_count, t.id',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    outbox._event_id_of(v_q), v_q.table_oid::regclass)
    USING v_ids;
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
-- A created table gets fillfactor 80, so writing a lease is a HOT update (no index touched), and
-- autovacuum settings for a table that is mostly empty and churns.
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
       ) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
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
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark, clocks and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
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

