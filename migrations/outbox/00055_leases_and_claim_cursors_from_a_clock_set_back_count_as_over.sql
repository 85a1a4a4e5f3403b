-- +goose Up
-- +goose StatementBegin
-- The claim behind claim_batch (mode 'lease', partitioned queues; claim_batch leases unpartitioned
-- rows in one statement of its own) and claim_locked (mode 'lock'). Returns the ids of the claimed
-- rows; the caller reads them back. Deliverable = unsent, not poisoned, due, lease free or expired,
-- and on a partitioned queue the first deliverable row of its partition. A lease that ends more than
-- a day after the clock (the longest a claim or extend_lease hands out) was written by a clock since
-- set back: it counts as over, or a crashed worker's row waited as long as the clock had jumped.
--
-- Partitioned queues claim through outbox.partition_heads (one row per partition with pending
-- work), never through the pending rows themselves, so blocked successors, heads in backoff and
-- poisoned rows cost nothing: a head backing off is "parked" until its time and woken (at most a
-- bounded number per call) when that time has come; a head whose row is leased stays ready and is
-- passed over with one probe. Heads are locked FOR NO KEY UPDATE SKIP LOCKED, which concurrent
-- claimers skip and producers (who hold only advisory locks) do not wait for. Each candidate is
-- still checked against the FIFO rule on the queue table, from the partition's floor (below it
-- every row is sent or poisoned), so poisoned rows in front of a head are not walked again.
--
-- p_run > 1 (claim_batch's and claim_locked's run_length): with each head claimed, the rows that
-- follow it in its partition (outbox._claim_run), up to p_run per partition and p_batch_size in
-- all, so that a partition's run costs one head search and, recorded together, one head write.
CREATE OR REPLACE FUNCTION outbox._claim(p_q outbox.queues, p_batch_size integer, p_lease interval, p_mode text,
                                         p_run integer)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
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
    AND (t.leased_until IS NULL OR t.leased_until <= $now OR t.leased_until > $now + interval ''1 day'')';
  v_all bigint[] := '{}';
  v_ids bigint[];
  v_keys text[];
  v_heads bigint[];
  v_floors bigint[];
  v_claimed_keys text[];
  v_stale text[];
  v_remaining integer := p_batch_size;
  v_until timestamptz;
  v_leased_until timestamptz;
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
  -- A run that began after now was recorded by a clock since set back: old, like the shared hint's
  -- time ahead of the clock below (taken as fresh, it aged only once the clock caught up).
  v_run_started double precision := CASE
    WHEN v_cursor_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
         AND v_cursor_value[2]::double precision <= pg_catalog.date_part('epoch', v_now)
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
    'NOT EXISTS (SELECT 1 FROM %s t WHERE t.id = h.head_id AND t.leased_until > $5
                                   AND t.leased_until <= $5 + interval ''1 day'')', v_table);
  -- Where a search stopped is the largest head id it saw, as its snapshot saw it. A head that a
  -- result moved on after the search's snapshot was taken comes back locked in its new version
  -- (READ COMMITTED re-reads a row it locks), with the id of its key's next row, as far ahead as
  -- that row is: taken as the stop, it sent every replica's next claim past the queue's last head
  -- and on to the front (about half the claims of 4 replicas searched the front again). A version
  -- the statement's snapshot does not see is such a head, and is left out of the stop (our own
  -- transaction's writes are seen, though its xid may be past the snapshot's xmax).
  v_seen_by_search constant text :=
    '(s.written_by = (SELECT pg_catalog.xid(pg_catalog.pg_current_xact_id_if_assigned()))
      OR pg_catalog.age(s.written_by) > (SELECT pg_catalog.age(pg_catalog.xid(pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()))))
         AND s.written_by <> ALL (ARRAY(SELECT pg_catalog.xid(pg_catalog.pg_snapshot_xip(pg_catalog.pg_current_snapshot())))))';
  v_busy text[];
  v_front boolean;
  v_asked integer;
  v_run_ids bigint[];
  -- Rows a claimed head brings with it (itself included): how many heads to ask for. Starts from
  -- what this session's claims of the queue learnt (a per-session hint, like the cursor): starting
  -- every claim from p_run asked for too few heads whenever runs are shorter, and every claim then
  -- searched, leased and extended runs twice. A pass with budget left over measures the rows per
  -- head; one that the batch cut short only says they are at least that many, and keeps the larger
  -- estimate. An estimate older than a second is not used, so longer runs are found again (that
  -- claim may take two passes).
  v_run_hint constant text := 'pgdrain.run_rows_' || p_q.queue_id;
  v_run_hint_value constant text[] := CASE WHEN p_run > 1 THEN pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_run_hint, true), ''), ',') END;
  v_run_hint_since double precision := CASE
    WHEN v_run_hint_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
         AND v_run_hint_value[2]::double precision <= pg_catalog.date_part('epoch', v_now)
    THEN v_run_hint_value[2]::double precision END;
  v_rows_per_head numeric := CASE WHEN p_run <= 1 THEN 1
    WHEN v_run_hint_since IS NULL THEN p_run
    ELSE LEAST(p_run, GREATEST(1, v_run_hint_value[1]::numeric)) END;
  v_seen_per_head numeric;
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

  -- Heads not built (after a crash): each claim that gets the rebuild lock rebuilds one part of them
  -- (outbox._restore_heads, about 50 ms of keys). Another claim's transaction rebuilding a part now
  -- holds the rebuild lock until it ends, a whole lock-mode batch: not waited for. This claim takes
  -- what the heads there are offer (each is checked against the FIFO rule from its floor, so a
  -- partial set is only incomplete), and the rebuilder's commit wakes the drainers.
  -- (Two IFs: the lock is tried only when the heads are not built, never by the usual claim.)
  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    IF pg_catalog.pg_try_advisory_xact_lock(1885823232 + p_q.queue_id, -1) THEN
      PERFORM outbox._restore_heads(p_q);
    END IF;
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now. Its first statement (a SERIALIZABLE transaction: every one)
  -- noted them in its hook (outbox._note_written).
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

  -- Lease mode: a cursor of this session's own goes on from where any claim of the queue last
  -- stopped among fresh heads, if that is further. The heads between were leased by other sessions
  -- (replicas): walking them cost each of four replicas the other three's claims (sampled claims in
  -- a 4-replica drain read 3-4x the buffers of a claim at rest; 1x with this). Not in lock mode,
  -- where it measured slower: a head another batch holds is skipped by its lock, and jumping past
  -- heads that batch then hands back sends more claims to the front.
  IF p_mode = 'lease' AND v_from_head IS NOT NULL AND v_start IS NOT NULL THEN
    v_from_head := GREATEST(v_from_head, pg_catalog.pg_sequence_last_value(v_start));
  END IF;

  FOR pass IN 1..4 LOOP
    v_front := v_from_head IS NULL;
    v_asked := pg_catalog.ceil(v_remaining / v_rows_per_head)::integer;
    IF NOT v_front THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE %s)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.xmin AS written_by FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 AND h.attempt_count = 0 AND h.head_id > $2
                 AND h.head_id <> ALL ($3) AND h.partition_key <> ALL ($4)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $6
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, v_not_in_flight),
        'integer, bigint, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint)')
        INTO v_keys, v_heads, v_floors, v_last_fresh
        USING p_q.queue_id, v_from_head, v_all || v_held, v_seen, v_now, v_asked;
      -- Too few past the cursor: the next pass goes on from the front; otherwise past these heads
      -- (a head in flight is not walked again by every pass).
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_asked THEN
        v_from_head := NULL;
      ELSE
        v_from_head := COALESCE(v_last_fresh, v_from_head);
      END IF;
    ELSE
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0 AND %s),
                pg_catalog.bool_and(s.attempt_count = 0)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count, h.xmin AS written_by
               FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
                 -- locks: without this a later pass would take them again.
                 AND (h.head_id IS NULL OR h.head_id <> ALL ($2))
                 AND h.partition_key <> ALL ($3)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $5
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, pg_catalog.replace(v_not_in_flight, '$5', '$4')),
        'integer, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint, pgdrain_only_fresh boolean)')
        INTO v_keys, v_heads, v_floors, v_last_fresh, v_only_fresh
        USING p_q.queue_id, v_all || v_held, v_seen, v_now, v_asked;
      v_run_started := pg_catalog.date_part('epoch', v_now);
      -- As many fresh heads as asked for: the next pass goes on past them as from a cursor.
      IF v_only_fresh AND pg_catalog.cardinality(v_keys) = v_asked THEN
        v_from_head := v_last_fresh;
      END IF;
    END IF;
    IF v_keys IS NULL THEN
      EXIT WHEN v_front;
      CONTINUE;
    END IF;
    IF v_last_fresh IS NOT NULL THEN
      -- As numeric: a double's text follows the caller's extra_float_digits (at -15 the time read
      -- 2e+09, a cursor that never aged, and heads behind it waited for another session's claim).
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started::numeric, false);
      -- Every search past the start moves it on, in both modes: a session without a cursor of its
      -- own then starts past the heads just taken. Lock mode left it to the search from the front,
      -- and such a claim walked every head moved in up to a second (3-6x a claim at rest in
      -- 4-replica drains).
      IF v_front_duty AND v_front THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      ELSIF NOT v_front AND v_start IS NOT NULL
            AND v_last_fresh > COALESCE(pg_catalog.pg_sequence_last_value(v_start), 0) THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      END IF;
    END IF;

    -- Lease mode leases what it locks in the same statement (one statement planned, not two),
    -- from the clock once the statement runs (an init plan, read at the first row leased; $7, the
    -- lease), one end for all its rows: a statement that waited for a lock on
    -- the table (DDL, a migration) handed out leases counted from before the wait, over already
    -- when it returned, and another claimer took the rows while the first delivered them.
    v_until := pg_catalog.clock_timestamp() + p_lease;
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH picked AS (
         SELECT t.id, t.%2$I AS key, t.ctid AS version, t.tableoid AS version_table
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS c(id, floor_id, key)
         -- A head must point at a row of its own partition (heads of new keys come from settings a
         -- producer could forge); one that does not is stale and refreshed below.
         JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%4$s
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           -- A floor at the head itself (a head a result moved on, the usual one) leaves no row
           -- below it to look for: no probe.
           AND (c.floor_id >= t.id
                OR NOT EXISTS (SELECT 1 FROM %1$s p
                               WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                                 AND p.sent_at IS NULL AND p.attempt_count < $2
                               OFFSET 0))
         FOR UPDATE OF t SKIP LOCKED),
       claimed AS (%5$s)
       SELECT pg_catalog.array_agg(claimed.id), pg_catalog.array_agg(claimed.key::text),
              pg_catalog.max(claimed.until) FROM claimed',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type,
      CASE WHEN p_mode = 'lease'
           THEN pg_catalog.format(
             -- By the version picked locked (a TID scan), not by id: a second index probe per row.
             -- A version newer than the statement's snapshot (a concurrent release committed
             -- between the snapshot and the lock) is not leased; its head counts as stale below.
             -- With its table: a ctid names a row only within one table, and a queue table
             -- partitioned by range has one per partition (each with its own (0,1)).
             'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(),
                leased_until = GREATEST($6, (SELECT pg_catalog.clock_timestamp() + $7))
              FROM picked WHERE u.ctid = picked.version AND u.tableoid = picked.version_table
              RETURNING u.id, picked.key, u.leased_until AS until', v_table)
           ELSE 'SELECT picked.id, picked.key, NULL::timestamptz AS until FROM picked' END),
      'bigint[], integer, bigint[], text[], timestamptz, timestamptz, interval',
      'TABLE(pgdrain_ids bigint[], pgdrain_keys text[], pgdrain_until timestamptz)')
      INTO v_ids, v_claimed_keys, v_leased_until USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now, v_until, p_lease;
    -- A run's rows end their leases with its head's.
    v_until := COALESCE(v_leased_until, v_until);

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_run > 1 AND v_remaining > 0 THEN
        v_run_ids := outbox._claim_run(p_q, v_ids, v_claimed_keys, p_run - 1, v_remaining, v_now, v_until, p_mode);
        v_all := v_all || v_run_ids;
        v_remaining := v_remaining - pg_catalog.cardinality(v_run_ids);
        v_seen_per_head := (pg_catalog.cardinality(v_ids) + pg_catalog.cardinality(v_run_ids))::numeric
                           / pg_catalog.cardinality(v_ids);
        v_rows_per_head := LEAST(p_run, GREATEST(1, CASE WHEN v_remaining > 0 THEN v_seen_per_head
                                                         ELSE GREATEST(v_seen_per_head, v_rows_per_head) END));
        v_run_hint_since := COALESCE(v_run_hint_since, pg_catalog.date_part('epoch', v_now));
        PERFORM pg_catalog.set_config(v_run_hint,
          pg_catalog.round(v_rows_per_head, 2) || ',' || v_run_hint_since::numeric, false);
      END IF;
    END IF;

    -- Heads not claimed are in flight (their row is leased right now: nothing to refresh, their
    -- result moves them on, and an expired lease makes the row claimable again through the same
    -- head; this call looks at them no more) or stale: pointing at a row that is no longer (or not
    -- yet) the partition's deliverable head, refreshed here.
    -- NOT IN a subquery: a hashed subplan, linear in the keys (<> ALL compared every key with every
    -- claimed one: 0.7 ms per claim of 256 rows, 10 ms of 1,000).
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k NOT IN (SELECT c FROM pg_catalog.unnest(v_claimed_keys) AS c);
    v_busy := NULL;
    IF v_stale IS NOT NULL THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NULL),
                pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NOT NULL)
         FROM unnest($1::bigint[], $2::text[]) AS c(id, key)
         LEFT JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%3$s AND t.sent_at IS NULL
           AND t.attempt_count < $4 AND t.leased_until > $5 AND t.leased_until <= $5 + interval ''1 day''
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
-- Lease mode: leases up to batch_size deliverable rows for `lease`, each with its own fresh
-- lease_token, in one short transaction. Results come back through apply_result(s) and count only
-- while the token still matches. Order: attempt_count, id (fresh rows overtake retried ones).
-- Due times and leases are read from the clock at the claim, not now(): in a transaction that
-- began long ago now() would hand out a lease that is already over. A lease ending more than a day
-- after the clock was written by a clock since set back: it counts as over (see outbox._claim).
--
-- The body of claim_batch and claim_runs (fn names the caller in errors).
-- run_length > 1 (claim_runs) takes, with each partition's head, the rows that
-- follow it in its partition, up to run_length per partition and batch_size in all, each with its
-- own lease_token: apply a partition's rows in order and stop at its first failure, giving the rest
-- back (outbox.release) untouched. Rows then come in id order (a partition's rows in its order).
-- Recording a partition's run in one apply_results moves its head once. Unpartitioned queues
-- ignore it.
CREATE OR REPLACE FUNCTION outbox._claim_batch(fn text, queue text, batch_size integer, lease interval, run_length integer)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_clock timestamptz;
  -- The rows a claim returns, as outbox._prepared's functions declare them.
  v_rows constant text := 'TABLE(pgdrain_id bigint, pgdrain_event_type text, pgdrain_payload jsonb, '
    'pgdrain_partition_key text, pgdrain_attempt_count integer, pgdrain_lease_token uuid, '
    'pgdrain_leased_until timestamptz, pgdrain_created_at timestamptz, pgdrain_event_id uuid, pgdrain_headers jsonb)';
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  PERFORM outbox._check_lease(fn, lease);
  PERFORM outbox._check_run_length(fn, run_length);
  IF v_q.partition_column IS NULL THEN
    -- One statement: pick, lease and return (one call, one plan kept by outbox._prepared).
    -- One clock reading for the due times; the lease, one end for every row, counted from the clock
    -- once the statement runs (an init plan, read at the first row leased), not before a wait for
    -- a lock on the table (DDL, a migration): such a lease was over already when the claim returned.
    v_clock := pg_catalog.clock_timestamp();
    RETURN QUERY EXECUTE outbox._prepared(v_q.queue_id, pg_catalog.format(
      'WITH leased AS (
         UPDATE %1$s t SET lease_token = pg_catalog.gen_random_uuid(),
           leased_until = GREATEST($4, (SELECT pg_catalog.clock_timestamp())) + $3
         WHERE t.id = ANY (ARRAY(
           SELECT s.id FROM %1$s s
           WHERE s.sent_at IS NULL AND s.attempt_count < $2
             AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= $4)
             AND (s.leased_until IS NULL OR s.leased_until <= $4 OR s.leased_until > $4 + interval ''1 day'')
           ORDER BY s.attempt_count, s.id LIMIT $1
           FOR UPDATE SKIP LOCKED))
         RETURNING t.id, t.event_type, t.payload, NULL::text, t.attempt_count, t.lease_token, t.leased_until,
                   t.created_at, %2$s, t.headers)
       SELECT * FROM leased ORDER BY 5, 1', v_q.table_oid::regclass, outbox._event_id_of(v_q)),
      'integer, integer, interval, timestamptz', v_rows)
      USING batch_size, v_q.max_attempts, lease, v_clock;
    RETURN;
  END IF;
  v_ids := outbox._claim(v_q, batch_size, lease, 'lease', run_length);
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    -- id = ANY('{}') is constant false, which "implies" any partial index's predicate: the planner
    -- would then walk the claim index end to end to return nothing.
    RETURN;
  END IF;
  -- With its plan kept (outbox._prepared): planned on every call, reading back a batch of 32 cost
  -- 3x what it does kept (145-205 -> 49 µs per call in claim_locked's read-back, the same statement).
  RETURN QUERY EXECUTE outbox._prepared(v_q.queue_id, pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.lease_token, t.leased_until, t.created_at,
            %s, t.headers
     FROM %s t WHERE t.id = ANY ($1) ORDER BY %s',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    outbox._event_id_of(v_q), v_q.table_oid::regclass,
    CASE WHEN run_length > 1 THEN 't.id' ELSE 't.attempt_count, t.id' END),
    'bigint[]', v_rows)
    USING v_ids;
END;
$$;

-- +goose StatementEnd

-- +goose StatementBegin
-- The rest of each claimed head's run (outbox._claim with p_run > 1): the rows that follow head
-- p_heads[i] in partition p_keys[i], in id order, up to p_more per partition and p_budget in all,
-- leased with p_until and fresh tokens (lease mode) or locked (lock mode). A run is unbroken: it
-- stops before the first pending row that is not due, is leased, or is locked by another session
-- (a poisoned row is no part of the order and is stepped over, as the FIFO rule does), so the
-- rows it returns are exactly the next ones their partition delivers. The caller holds each
-- head's row (leased or locked, with its partition head locked), so no other claim can reach
-- these rows meanwhile: they are not heads. A lease ending more than a day after the clock counts
-- as over (written by a clock since set back, see outbox._claim).
-- Never waits: rows are locked SKIP LOCKED (a session holding one of them, say an operator's
-- open transaction, must not stall every claim), and a row skipped or changed since the search
-- ends its run there: what was leased past it is given back at once, what was locked past it is
-- not returned (the caller's COMMIT unlocks it untouched).
CREATE OR REPLACE FUNCTION outbox._claim_run(p_q outbox.queues, p_heads bigint[], p_keys text[], p_more integer,
                                             p_budget integer, p_now timestamptz, p_until timestamptz, p_mode text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table constant regclass := p_q.table_oid::regclass;
  v_deliverable constant text := 'u.sent_at IS NULL AND u.attempt_count < $3
    AND (u.next_attempt_at IS NULL OR u.next_attempt_at <= $4)
    AND (u.leased_until IS NULL OR u.leased_until <= $4 OR u.leased_until > $4 + interval ''1 day'')';
  v_planned bigint[];
  v_ords bigint[];
  v_taken bigint[];
  v_kept bigint[];
  v_dropped bigint[];
BEGIN
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH c AS (
       SELECT c.head, c.key, c.ord FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS c(head, key, ord)),
     run AS (
       SELECT r.id, r.ord FROM (
         SELECT n.id, c.ord,
                pg_catalog.bool_and(n.due) OVER (PARTITION BY c.ord ORDER BY n.id) AS unbroken
         FROM c CROSS JOIN LATERAL (
           SELECT t.id, (t.next_attempt_at IS NULL OR t.next_attempt_at <= $4)
                        AND (t.leased_until IS NULL OR t.leased_until <= $4 OR t.leased_until > $4 + interval ''1 day'') AS due
           FROM %1$s t
           WHERE t.%2$I = c.key::%3$s AND t.id > c.head AND t.sent_at IS NULL AND t.attempt_count < $3
           ORDER BY t.id LIMIT $5) n) r
       WHERE r.unbroken
       ORDER BY r.ord, r.id
       LIMIT $6),
     taken AS (
       SELECT u.id FROM %1$s u
       WHERE u.id = ANY (ARRAY(SELECT run.id FROM run)) AND %4$s
       FOR UPDATE OF u SKIP LOCKED),
     done AS (%5$s)
     SELECT (SELECT pg_catalog.array_agg(run.id ORDER BY run.ord, run.id) FROM run),
            (SELECT pg_catalog.array_agg(run.ord ORDER BY run.ord, run.id) FROM run),
            (SELECT pg_catalog.array_agg(done.id) FROM done)',
    v_table, p_q.partition_column, p_q.partition_type, v_deliverable,
    CASE WHEN p_mode = 'lease'
         THEN pg_catalog.format(
           'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $7
            FROM taken WHERE u.id = taken.id RETURNING u.id', v_table)
         ELSE 'SELECT taken.id FROM taken' END),
    'bigint[], text[], integer, timestamptz, integer, integer, timestamptz',
    'TABLE(pgdrain_planned bigint[], pgdrain_ords bigint[], pgdrain_taken bigint[])')
    INTO v_planned, v_ords, v_taken
    USING p_heads, p_keys, p_q.max_attempts, p_now, p_more, p_budget, p_until;

  IF v_planned IS NULL THEN
    RETURN '{}';
  END IF;
  IF pg_catalog.cardinality(v_planned) = COALESCE(pg_catalog.cardinality(v_taken), 0) THEN
    RETURN v_planned;
  END IF;
  -- A row of a run was skipped: its run ends before it.
  SELECT pg_catalog.array_agg(x.id ORDER BY x.ord, x.id) FILTER (WHERE NOT x.broken),
         pg_catalog.array_agg(x.id) FILTER (WHERE x.broken AND x.id = ANY (COALESCE(v_taken, '{}')))
    INTO v_kept, v_dropped
  FROM (SELECT p.id, p.ord,
               pg_catalog.bool_or(p.id <> ALL (COALESCE(v_taken, '{}')))
                 OVER (PARTITION BY p.ord ORDER BY p.id) AS broken
        FROM unnest(v_planned, v_ords) AS p(id, ord)) x;
  IF v_dropped IS NOT NULL AND p_mode = 'lease' THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s u SET lease_token = NULL, leased_until = NULL WHERE u.id = ANY ($1)', v_table)
      USING v_dropped;
  END IF;
  RETURN COALESCE(v_kept, '{}');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Points the head of each given partition at its first deliverable row (the smallest id at or above
-- the partition's floor among unsent, not poisoned rows), parked until that row's lease or backoff
-- ends (not until a lease more than a day ahead: a clock since set back wrote it, and it counts as
-- over, see outbox._claim); creates missing heads. The caller must have written its own changes in an earlier
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
            NULLIF(GREATEST(n.next_attempt_at, CASE WHEN n.leased_until <= $4 + interval ''1 day'' THEN n.leased_until END, $4), $4) AS parked,
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
-- Finds the pending deliverable rows of a partitioned queue that no claim can reach, and (unless
-- dry_run) makes them reachable again. Partition heads, floors and parks are a cache of the queue
-- table (outbox.partition_heads); this checks the cache against the table, one key at a time:
--   missing_head     the key has a deliverable row but no head: no claim would ever look at it;
--   floor_above_row  the head's floor (below it, everything is taken to be sent or poisoned) is above
--                    the key's first deliverable row: that row would never be found;
--   parked_past_due  the head is parked (lease or backoff) more than a second past the time its first
--                    deliverable row is due. An empty head a claim parked for a second beside a
--                    producer committing rows of its key (outbox._refresh_heads) is within that
--                    second: "now" in a due time is the clock read by the check's statement, after
--                    its snapshot, so after the commit of every park it sees (a clock read before the
--                    snapshot was behind the park's own clock when that claim committed in between:
--                    it reported the designed park, counted a repair and logged a WARNING);
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
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
  -- When the repair ran (outbox.repairs); due times use the clock of the check itself (see above).
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_noted text[] := '{}';
  r record;
BEGIN
  IF dry_run IS NULL THEN
    PERFORM outbox._invalid(fn, 'dry_run must not be NULL');
  END IF;
  IF v_q.partition_column IS NULL
     OR NOT pg_catalog.pg_try_advisory_xact_lock(1885823232 + v_q.queue_id, -3)
     -- Not built yet (after a crash): claims are rebuilding them, a part each (outbox._restore_heads).
     OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id) THEN
    RETURN;
  END IF;

  -- Keys this very transaction wrote whose commit step has not run yet (a requeue_poisoned or a
  -- producer before the repair, in one transaction): that step makes or moves their heads, as a
  -- claim in the same transaction does first (outbox._claim). Not problems.
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
    SELECT COALESCE(pg_catalog.array_agg(u.k), '{}') INTO v_noted
    FROM (SELECT x.k FROM outbox.commit_notes n CROSS JOIN LATERAL pg_catalog.unnest(n.keys) AS x(k)
          WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = v_q.table_oid
          UNION
          SELECT x.k FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids, h.keys) AS x(table_oid, k)
          WHERE h.xid = pg_catalog.pg_current_xact_id() AND x.table_oid = v_q.table_oid) u;
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
         SELECT t.id, GREATEST(t.next_attempt_at, CASE WHEN t.leased_until <= pg_catalog.clock_timestamp() + interval ''1 day'' THEN t.leased_until END,
                               pg_catalog.clock_timestamp()) AS due
         FROM %1$s t
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
       WHERE keys.k IS NOT NULL AND NOT n.noted AND keys.k::text <> ALL ($3)) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_noted
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
          -- The first statement's notes (a SERIALIZABLE transaction's: all) are in its hook, one entry
          -- per row (outbox._note_written).
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
-- The common core of the operators' row actions (poison_row, retry_row, dismiss_poisoned): one
-- statement that takes the rows still in the state the operator saw, changes them, and logs each
-- in outbox.operator_actions (with the session's login role, the reason and the attempt count it had); then the partitions'
-- heads follow (outbox._refresh_heads) and an idle drainer is woken when a row became claimable.
-- Fenced: a row that moved on (sent, requeued to a new id, another attempt recorded, poisoned or
-- not as the action needs) is not taken, nor one a worker delivers right now (a live lease, or a
-- lock-mode claim's row lock: SKIP LOCKED, never waiting). An expired lease's token is cleared with
-- the change, so that worker's late result is refused like any other after its lease ran out (so is
-- one ending more than a day ahead, which a clock since set back wrote: see outbox._claim).
--   poison   pending, attempt_count = p_attempt_count: poisoned (attempt_count = max_attempts), its
--            key's later rows go past it; requeue_poisoned delivers it later, at the tail of its key.
--   retry    pending and backing off, attempt_count = p_attempt_count: due now.
--   dismiss  poisoned: never delivered, kept as history (sent_at is set, so nothing counts it as
--            pending or poisoned; purge_sent removes it with the sent rows), last_error says so.
-- poison and dismiss put their note in front of the row's last error, kept to 4000 characters in
-- all (as outbox._record keeps an error): a row poisoned, requeued and poisoned again many times
-- does not carry every earlier note.
-- Returns the ids changed.
CREATE OR REPLACE FUNCTION outbox._operator_act(p_q outbox.queues, p_action text, p_ids bigint[],
                                                p_attempt_count integer, p_reason text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
-- (enable_seqscan = off makes a plan that cannot avoid a scan cost about 1e10, past the JIT
-- thresholds: it was compiled on every call, 0.15-1.6 s.)
SET jit = off
AS $$
DECLARE
  v_note constant text := pg_catalog.format('%s by %s: %s',
    CASE p_action WHEN 'poison' THEN 'poisoned' WHEN 'dismiss' THEN 'dismissed' ELSE 'retried' END,
    session_user, p_reason);
  v_ids bigint[];
  v_keys text[];
BEGIN
  EXECUTE pg_catalog.format(
    'WITH r AS (
       SELECT t.id, t.attempt_count FROM %1$s t
       WHERE t.id = ANY ($1) AND t.sent_at IS NULL AND %4$s
         AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.clock_timestamp()
              OR t.leased_until > pg_catalog.clock_timestamp() + interval ''1 day'')
       FOR UPDATE OF t SKIP LOCKED),
     u AS (
       UPDATE %1$s t SET %5$s, leased_until = NULL, lease_token = NULL
       FROM r WHERE t.id = r.id
       RETURNING t.id, %2$s AS event_id, %3$s AS key, r.attempt_count),
     logged AS (
       INSERT INTO outbox.operator_actions (queue, action, row_id, event_id, partition_key, attempt_count, reason)
       SELECT $5, $6, u.id, u.event_id, u.key, u.attempt_count, $7 FROM u
       RETURNING row_id, partition_key)
     SELECT pg_catalog.array_agg(l.row_id ORDER BY l.row_id), pg_catalog.array_agg(DISTINCT l.partition_key)
     FROM logged l',
    p_q.table_oid,
    outbox._event_id_of(p_q),
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END,
    CASE p_action
      WHEN 'poison' THEN 't.attempt_count = $2 AND t.attempt_count < $3'
      WHEN 'retry' THEN 't.attempt_count = $2 AND t.attempt_count < $3 AND t.next_attempt_at > pg_catalog.clock_timestamp()'
      ELSE 't.attempt_count >= $3' END,
    CASE p_action
      WHEN 'poison' THEN 'attempt_count = $3, next_attempt_at = NULL, last_error = pg_catalog.left($4 || COALESCE('' (last error: '' || t.last_error || '')'', ''''), 4000)'
      WHEN 'retry' THEN 'next_attempt_at = NULL'
      ELSE 'sent_at = pg_catalog.now(), next_attempt_at = NULL, last_error = pg_catalog.left($4 || COALESCE('' (last error: '' || t.last_error || '')'', ''''), 4000)' END)
    INTO v_ids, v_keys
    USING p_ids, p_attempt_count, p_q.max_attempts, v_note, p_q.queue, p_action, p_reason;
  IF v_ids IS NULL THEN
    RETURN '{}';
  END IF;
  RAISE LOG 'pgdrain: % % row(s) % of queue %: %', session_user,
    CASE p_action WHEN 'poison' THEN 'poisoned' WHEN 'dismiss' THEN 'dismissed' ELSE 'retried' END,
    v_ids, p_q.queue, COALESCE(p_reason, '(no reason given)');
  IF p_action = 'poison' THEN
    PERFORM outbox._keep_poisoned(p_q, v_ids);
  END IF;
  IF p_q.partition_column IS NOT NULL AND p_action <> 'dismiss' THEN
    -- Heads another transaction holds (a lock-mode batch delivering the key's head row) are
    -- skipped, never waited for: that batch moves its head when it settles, and a claim that finds
    -- a head at a row no longer deliverable refreshes it.
    SELECT pg_catalog.array_agg(k) INTO v_keys
    FROM pg_catalog.unnest(pg_catalog.array_remove(v_keys, NULL)) AS k
    WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads h WHERE h.queue_id = p_q.queue_id AND h.partition_key = k)
       OR k IN (SELECT h.partition_key FROM outbox.partition_heads h
                WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
                FOR NO KEY UPDATE SKIP LOCKED);
    PERFORM outbox._refresh_heads(p_q, v_keys);
  END IF;
  IF p_action = 'retry' OR p_q.partition_column IS NOT NULL AND p_action = 'poison' THEN
    -- Claimable now: the row itself, or the row behind a skipped head.
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- One row of gauges for metrics. Exact counts from one pass over the pending rows through the
-- (attempt_count, id) partial index: cost follows the pending backlog, never the sent history.
-- pending = unsent and not poisoned; ready = pending, due and not leased; leased = lease live (a
-- lease ending more than a day ahead, written by a clock since set back, is over: outbox._claim);
-- backing_off = pending with next_attempt_at in the future; poisoned = attempt_count >= max.
-- The oldest pending row is the oldest with a finite created_at: a producer may write 'infinity'
-- or '-infinity', which made the subtraction fail (22008) for every caller of stats.
CREATE OR REPLACE FUNCTION outbox.stats(queue text)
RETURNS TABLE(pending bigint, ready bigint, leased bigint, backing_off bigint, poisoned bigint,
              oldest_pending_at timestamptz, oldest_pending_age interval)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('stats', queue);
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1
                               AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= pg_catalog.now())
                               AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.now()
                                    OR t.leased_until > pg_catalog.now() + interval ''1 day'')),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1 AND t.leased_until > pg_catalog.now()
                                        AND t.leased_until <= pg_catalog.now() + interval ''1 day''),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1 AND t.next_attempt_at > pg_catalog.now()),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count >= $1),
            pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1 AND pg_catalog.isfinite(t.created_at)),
            pg_catalog.now() - pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1 AND pg_catalog.isfinite(t.created_at))
     FROM %s t WHERE t.sent_at IS NULL AND t.attempt_count >= 0', v_q.table_oid::regclass)
    USING v_q.max_attempts;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The max_partitions partitions whose oldest pending row is older than older_than, oldest first,
-- with their head and why it is not moving. Reads outbox.partition_heads, so its cost follows the
-- number of partitions with pending work, not the backlog. A key whose head points at a row that is
-- gone is listed with its oldest pending row.
CREATE OR REPLACE FUNCTION outbox.wedged_partitions(queue text, older_than interval, max_partitions integer DEFAULT 10)
RETURNS TABLE(partition_key text, head_id bigint, head_attempt_count integer, head_last_error text,
              oldest_pending_at timestamptz, pending bigint, reason text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'wedged_partitions';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF v_q.partition_column IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('queue %s has no partition column', v_q.queue));
  END IF;
  PERFORM outbox._check_span(fn, 'older_than', older_than);
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  -- Further back than the clock can subtract (22008 from now() - older_than).
  IF older_than > interval '1000 years' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('older_than must be at most 1000 years, got %s', older_than));
  END IF;
  IF max_partitions IS NULL OR max_partitions < 1 OR max_partitions > 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_partitions must be between 1 and 10000, got %s', COALESCE(max_partitions::text, 'NULL')));
  END IF;
  -- A head whose row is gone (deleted by the application, or made sent by hand) is not moved by
  -- claims until its park ends or the repair pass finds it, and its key waits meanwhile: listed
  -- with the key's oldest pending row, and says so (an inner join on the head's row left out exactly
  -- that stuck key).
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT h.partition_key, COALESCE(t.id, f.id), COALESCE(t.attempt_count, f.attempt_count),
            CASE WHEN t.id IS NOT NULL THEN t.last_error ELSE f.last_error END, COALESCE(t.created_at, f.created_at),
            (SELECT pg_catalog.count(*) FROM %1$s p
             WHERE p.%2$I = h.partition_key::%3$s AND p.sent_at IS NULL AND p.attempt_count < $2),
            CASE
              WHEN t.id IS NULL THEN ''its head points at row '' || h.head_id
                   || '', which is gone or sent: the next claim to reach the head, or the repair pass (outbox.repair), moves it on''
              WHEN t.leased_until > pg_catalog.now() AND t.leased_until <= pg_catalog.now() + interval ''1 day''
                THEN ''leased until '' || t.leased_until
              WHEN t.next_attempt_at > pg_catalog.now() THEN ''backing off until '' || t.next_attempt_at
                   || '' after '' || t.attempt_count || '' attempts''
              ELSE ''ready, waiting for a drainer'' END
     FROM outbox.partition_heads h
     LEFT JOIN %1$s t ON t.id = h.head_id AND t.sent_at IS NULL
     LEFT JOIN LATERAL (SELECT p.id, p.attempt_count, p.last_error, p.created_at FROM %1$s p
                        WHERE t.id IS NULL AND h.head_id IS NOT NULL
                          AND p.%2$I = h.partition_key::%3$s AND p.sent_at IS NULL AND p.attempt_count < $2
                        ORDER BY p.id LIMIT 1) f ON true
     WHERE h.queue_id = $1 AND COALESCE(t.created_at, f.created_at) < pg_catalog.now() - $3
     ORDER BY COALESCE(t.created_at, f.created_at)
     LIMIT $4', v_q.table_oid::regclass, v_q.partition_column, v_q.partition_type)
    USING v_q.queue_id, v_q.max_attempts, older_than, max_partitions;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- When a claim should next be tried on a queue although no NOTIFY arrives: the earliest end of a
-- lease or backoff that parks work (a time at or before now() means "claim now"), or NULL when
-- nothing is parked. A worker that sleeps until then (or a NOTIFY) never waits for its poll
-- fallback. Partitioned queues: the parked heads, one index probe (a head parked empty for a
-- second while a producer of its key commits is included, so that row is not left waiting).
-- Unpartitioned queues: the first 1,000 pending rows in claim order, through the claim index
-- (bounded; rows further back are found by the claim that follows).
CREATE OR REPLACE FUNCTION outbox.next_due(queue text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('next_due', queue);
  v_at timestamptz;
BEGIN
  IF v_q.partition_column IS NOT NULL THEN
    SELECT h.parked_until INTO v_at FROM outbox.partition_heads h
    WHERE h.queue_id = v_q.queue_id AND h.parked_until IS NOT NULL
    ORDER BY h.parked_until LIMIT 1;
    -- Heads of leased rows are not parked (a claim writes only the row): their leases' ends, from
    -- the first 1,000 ready heads (when a claim found nothing, the ready heads are the ones in flight).
    RETURN LEAST(v_at, outbox._first_lease_end(v_q, 1000));
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.min(GREATEST(s.next_attempt_at,
                                    CASE WHEN s.leased_until <= pg_catalog.clock_timestamp() + interval ''1 day'' THEN s.leased_until END))
     FROM (SELECT t.next_attempt_at, t.leased_until FROM %s t
           WHERE t.sent_at IS NULL AND t.attempt_count < $1
           ORDER BY t.attempt_count, t.id LIMIT 1000) s', v_q.table_oid::regclass)
    INTO v_at USING v_q.max_attempts;
  RETURN v_at;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The earliest end of a live lease among the rows the first p_limit ready heads of a partitioned
-- queue point at (NULL: none). Claims do not park the heads of the rows they lease, so this is how
-- outbox.next_due learns when an in-flight row comes back if its worker never answers. A lease
-- ending more than a day ahead is over already (a clock since set back wrote it, see outbox._claim).
CREATE OR REPLACE FUNCTION outbox._first_lease_end(p_q outbox.queues, p_limit integer)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_at timestamptz;
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.min(t.leased_until)
     FROM (SELECT h.head_id FROM outbox.partition_heads h
           WHERE h.queue_id = $1 AND h.parked_until IS NULL
           ORDER BY h.attempt_count, h.head_id LIMIT $2) h
     JOIN %s t ON t.id = h.head_id
     WHERE t.sent_at IS NULL AND t.leased_until > pg_catalog.clock_timestamp()
       AND t.leased_until <= pg_catalog.clock_timestamp() + interval ''1 day''', p_q.table_oid::regclass)
    INTO v_at USING p_q.queue_id, p_limit;
  RETURN v_at;
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
  SELECT '0.1.0'::text, 55;
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
ALTER FUNCTION outbox.heads_rebuild(text) SECURITY DEFINER;
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
-- Whether claims are rebuilding a queue's heads after a crash (00051): pgdrain check, the drainer's
-- gauges, the console.
GRANT EXECUTE ON FUNCTION outbox.heads_rebuild(text) TO pgdrain_worker, pgdrain_operator, pgdrain_reader;

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
--
-- p_run > 1 (claim_batch's and claim_locked's run_length): with each head claimed, the rows that
-- follow it in its partition (outbox._claim_run), up to p_run per partition and p_batch_size in
-- all, so that a partition's run costs one head search and, recorded together, one head write.
CREATE OR REPLACE FUNCTION outbox._claim(p_q outbox.queues, p_batch_size integer, p_lease interval, p_mode text,
                                         p_run integer)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
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
  v_leased_until timestamptz;
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
  -- Where a search stopped is the largest head id it saw, as its snapshot saw it. A head that a
  -- result moved on after the search's snapshot was taken comes back locked in its new version
  -- (READ COMMITTED re-reads a row it locks), with the id of its key's next row, as far ahead as
  -- that row is: taken as the stop, it sent every replica's next claim past the queue's last head
  -- and on to the front (about half the claims of 4 replicas searched the front again). A version
  -- the statement's snapshot does not see is such a head, and is left out of the stop (our own
  -- transaction's writes are seen, though its xid may be past the snapshot's xmax).
  v_seen_by_search constant text :=
    '(s.written_by = (SELECT pg_catalog.xid(pg_catalog.pg_current_xact_id_if_assigned()))
      OR pg_catalog.age(s.written_by) > (SELECT pg_catalog.age(pg_catalog.xid(pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()))))
         AND s.written_by <> ALL (ARRAY(SELECT pg_catalog.xid(pg_catalog.pg_snapshot_xip(pg_catalog.pg_current_snapshot())))))';
  v_busy text[];
  v_front boolean;
  v_asked integer;
  v_run_ids bigint[];
  -- Rows a claimed head brings with it (itself included): how many heads to ask for. Starts from
  -- what this session's claims of the queue learnt (a per-session hint, like the cursor): starting
  -- every claim from p_run asked for too few heads whenever runs are shorter, and every claim then
  -- searched, leased and extended runs twice. A pass with budget left over measures the rows per
  -- head; one that the batch cut short only says they are at least that many, and keeps the larger
  -- estimate. An estimate older than a second is not used, so longer runs are found again (that
  -- claim may take two passes).
  v_run_hint constant text := 'pgdrain.run_rows_' || p_q.queue_id;
  v_run_hint_value constant text[] := CASE WHEN p_run > 1 THEN pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_run_hint, true), ''), ',') END;
  v_run_hint_since double precision := CASE
    WHEN v_run_hint_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_run_hint_value[2]::double precision END;
  v_rows_per_head numeric := CASE WHEN p_run <= 1 THEN 1
    WHEN v_run_hint_since IS NULL THEN p_run
    ELSE LEAST(p_run, GREATEST(1, v_run_hint_value[1]::numeric)) END;
  v_seen_per_head numeric;
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

  -- Heads not built (after a crash): each claim that gets the rebuild lock rebuilds one part of them
  -- (outbox._restore_heads, about 50 ms of keys). Another claim's transaction rebuilding a part now
  -- holds the rebuild lock until it ends, a whole lock-mode batch: not waited for. This claim takes
  -- what the heads there are offer (each is checked against the FIFO rule from its floor, so a
  -- partial set is only incomplete), and the rebuilder's commit wakes the drainers.
  -- (Two IFs: the lock is tried only when the heads are not built, never by the usual claim.)
  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    IF pg_catalog.pg_try_advisory_xact_lock(1885823232 + p_q.queue_id, -1) THEN
      PERFORM outbox._restore_heads(p_q);
    END IF;
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now. Its first statement (a SERIALIZABLE transaction: every one)
  -- noted them in its hook (outbox._note_written).
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

  -- Lease mode: a cursor of this session's own goes on from where any claim of the queue last
  -- stopped among fresh heads, if that is further. The heads between were leased by other sessions
  -- (replicas): walking them cost each of four replicas the other three's claims (sampled claims in
  -- a 4-replica drain read 3-4x the buffers of a claim at rest; 1x with this). Not in lock mode,
  -- where it measured slower: a head another batch holds is skipped by its lock, and jumping past
  -- heads that batch then hands back sends more claims to the front.
  IF p_mode = 'lease' AND v_from_head IS NOT NULL AND v_start IS NOT NULL THEN
    v_from_head := GREATEST(v_from_head, pg_catalog.pg_sequence_last_value(v_start));
  END IF;

  FOR pass IN 1..4 LOOP
    v_front := v_from_head IS NULL;
    v_asked := pg_catalog.ceil(v_remaining / v_rows_per_head)::integer;
    IF NOT v_front THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE %s)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.xmin AS written_by FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 AND h.attempt_count = 0 AND h.head_id > $2
                 AND h.head_id <> ALL ($3) AND h.partition_key <> ALL ($4)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $6
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, v_not_in_flight),
        'integer, bigint, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint)')
        INTO v_keys, v_heads, v_floors, v_last_fresh
        USING p_q.queue_id, v_from_head, v_all || v_held, v_seen, v_now, v_asked;
      -- Too few past the cursor: the next pass goes on from the front; otherwise past these heads
      -- (a head in flight is not walked again by every pass).
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_asked THEN
        v_from_head := NULL;
      ELSE
        v_from_head := COALESCE(v_last_fresh, v_from_head);
      END IF;
    ELSE
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0 AND %s),
                pg_catalog.bool_and(s.attempt_count = 0)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count, h.xmin AS written_by
               FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
                 -- locks: without this a later pass would take them again.
                 AND (h.head_id IS NULL OR h.head_id <> ALL ($2))
                 AND h.partition_key <> ALL ($3)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $5
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, pg_catalog.replace(v_not_in_flight, '$5', '$4')),
        'integer, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint, pgdrain_only_fresh boolean)')
        INTO v_keys, v_heads, v_floors, v_last_fresh, v_only_fresh
        USING p_q.queue_id, v_all || v_held, v_seen, v_now, v_asked;
      v_run_started := pg_catalog.date_part('epoch', v_now);
      -- As many fresh heads as asked for: the next pass goes on past them as from a cursor.
      IF v_only_fresh AND pg_catalog.cardinality(v_keys) = v_asked THEN
        v_from_head := v_last_fresh;
      END IF;
    END IF;
    IF v_keys IS NULL THEN
      EXIT WHEN v_front;
      CONTINUE;
    END IF;
    IF v_last_fresh IS NOT NULL THEN
      -- As numeric: a double's text follows the caller's extra_float_digits (at -15 the time read
      -- 2e+09, a cursor that never aged, and heads behind it waited for another session's claim).
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started::numeric, false);
      -- Every search past the start moves it on, in both modes: a session without a cursor of its
      -- own then starts past the heads just taken. Lock mode left it to the search from the front,
      -- and such a claim walked every head moved in up to a second (3-6x a claim at rest in
      -- 4-replica drains).
      IF v_front_duty AND v_front THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      ELSIF NOT v_front AND v_start IS NOT NULL
            AND v_last_fresh > COALESCE(pg_catalog.pg_sequence_last_value(v_start), 0) THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      END IF;
    END IF;

    -- Lease mode leases what it locks in the same statement (one statement planned, not two),
    -- from the clock once the statement runs (an init plan, read at the first row leased; $7, the
    -- lease), one end for all its rows: a statement that waited for a lock on
    -- the table (DDL, a migration) handed out leases counted from before the wait, over already
    -- when it returned, and another claimer took the rows while the first delivered them.
    v_until := pg_catalog.clock_timestamp() + p_lease;
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH picked AS (
         SELECT t.id, t.%2$I AS key, t.ctid AS version, t.tableoid AS version_table
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS c(id, floor_id, key)
         -- A head must point at a row of its own partition (heads of new keys come from settings a
         -- producer could forge); one that does not is stale and refreshed below.
         JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%4$s
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           -- A floor at the head itself (a head a result moved on, the usual one) leaves no row
           -- below it to look for: no probe.
           AND (c.floor_id >= t.id
                OR NOT EXISTS (SELECT 1 FROM %1$s p
                               WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                                 AND p.sent_at IS NULL AND p.attempt_count < $2
                               OFFSET 0))
         FOR UPDATE OF t SKIP LOCKED),
       claimed AS (%5$s)
       SELECT pg_catalog.array_agg(claimed.id), pg_catalog.array_agg(claimed.key::text),
              pg_catalog.max(claimed.until) FROM claimed',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type,
      CASE WHEN p_mode = 'lease'
           THEN pg_catalog.format(
             -- By the version picked locked (a TID scan), not by id: a second index probe per row.
             -- A version newer than the statement's snapshot (a concurrent release committed
             -- between the snapshot and the lock) is not leased; its head counts as stale below.
             -- With its table: a ctid names a row only within one table, and a queue table
             -- partitioned by range has one per partition (each with its own (0,1)).
             'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(),
                leased_until = GREATEST($6, (SELECT pg_catalog.clock_timestamp() + $7))
              FROM picked WHERE u.ctid = picked.version AND u.tableoid = picked.version_table
              RETURNING u.id, picked.key, u.leased_until AS until', v_table)
           ELSE 'SELECT picked.id, picked.key, NULL::timestamptz AS until FROM picked' END),
      'bigint[], integer, bigint[], text[], timestamptz, timestamptz, interval',
      'TABLE(pgdrain_ids bigint[], pgdrain_keys text[], pgdrain_until timestamptz)')
      INTO v_ids, v_claimed_keys, v_leased_until USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now, v_until, p_lease;
    -- A run's rows end their leases with its head's.
    v_until := COALESCE(v_leased_until, v_until);

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_run > 1 AND v_remaining > 0 THEN
        v_run_ids := outbox._claim_run(p_q, v_ids, v_claimed_keys, p_run - 1, v_remaining, v_now, v_until, p_mode);
        v_all := v_all || v_run_ids;
        v_remaining := v_remaining - pg_catalog.cardinality(v_run_ids);
        v_seen_per_head := (pg_catalog.cardinality(v_ids) + pg_catalog.cardinality(v_run_ids))::numeric
                           / pg_catalog.cardinality(v_ids);
        v_rows_per_head := LEAST(p_run, GREATEST(1, CASE WHEN v_remaining > 0 THEN v_seen_per_head
                                                         ELSE GREATEST(v_seen_per_head, v_rows_per_head) END));
        v_run_hint_since := COALESCE(v_run_hint_since, pg_catalog.date_part('epoch', v_now));
        PERFORM pg_catalog.set_config(v_run_hint,
          pg_catalog.round(v_rows_per_head, 2) || ',' || v_run_hint_since::numeric, false);
      END IF;
    END IF;

    -- Heads not claimed are in flight (their row is leased right now: nothing to refresh, their
    -- result moves them on, and an expired lease makes the row claimable again through the same
    -- head; this call looks at them no more) or stale: pointing at a row that is no longer (or not
    -- yet) the partition's deliverable head, refreshed here.
    -- NOT IN a subquery: a hashed subplan, linear in the keys (<> ALL compared every key with every
    -- claimed one: 0.7 ms per claim of 256 rows, 10 ms of 1,000).
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k NOT IN (SELECT c FROM pg_catalog.unnest(v_claimed_keys) AS c);
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
-- Lease mode: leases up to batch_size deliverable rows for `lease`, each with its own fresh
-- lease_token, in one short transaction. Results come back through apply_result(s) and count only
-- while the token still matches. Order: attempt_count, id (fresh rows overtake retried ones).
-- Due times and leases are read from the clock at the claim, not now(): in a transaction that
-- began long ago now() would hand out a lease that is already over.
--
-- The body of claim_batch and claim_runs (fn names the caller in errors).
-- run_length > 1 (claim_runs) takes, with each partition's head, the rows that
-- follow it in its partition, up to run_length per partition and batch_size in all, each with its
-- own lease_token: apply a partition's rows in order and stop at its first failure, giving the rest
-- back (outbox.release) untouched. Rows then come in id order (a partition's rows in its order).
-- Recording a partition's run in one apply_results moves its head once. Unpartitioned queues
-- ignore it.
CREATE OR REPLACE FUNCTION outbox._claim_batch(fn text, queue text, batch_size integer, lease interval, run_length integer)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_clock timestamptz;
  -- The rows a claim returns, as outbox._prepared's functions declare them.
  v_rows constant text := 'TABLE(pgdrain_id bigint, pgdrain_event_type text, pgdrain_payload jsonb, '
    'pgdrain_partition_key text, pgdrain_attempt_count integer, pgdrain_lease_token uuid, '
    'pgdrain_leased_until timestamptz, pgdrain_created_at timestamptz, pgdrain_event_id uuid, pgdrain_headers jsonb)';
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  PERFORM outbox._check_lease(fn, lease);
  PERFORM outbox._check_run_length(fn, run_length);
  IF v_q.partition_column IS NULL THEN
    -- One statement: pick, lease and return (one call, one plan kept by outbox._prepared).
    -- One clock reading for the due times; the lease, one end for every row, counted from the clock
    -- once the statement runs (an init plan, read at the first row leased), not before a wait for
    -- a lock on the table (DDL, a migration): such a lease was over already when the claim returned.
    v_clock := pg_catalog.clock_timestamp();
    RETURN QUERY EXECUTE outbox._prepared(v_q.queue_id, pg_catalog.format(
      'WITH leased AS (
         UPDATE %1$s t SET lease_token = pg_catalog.gen_random_uuid(),
           leased_until = GREATEST($4, (SELECT pg_catalog.clock_timestamp())) + $3
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
  v_ids := outbox._claim(v_q, batch_size, lease, 'lease', run_length);
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    -- id = ANY('{}') is constant false, which "implies" any partial index's predicate: the planner
    -- would then walk the claim index end to end to return nothing.
    RETURN;
  END IF;
  -- With its plan kept (outbox._prepared): planned on every call, reading back a batch of 32 cost
  -- 3x what it does kept (145-205 -> 49 µs per call in claim_locked's read-back, the same statement).
  RETURN QUERY EXECUTE outbox._prepared(v_q.queue_id, pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.lease_token, t.leased_until, t.created_at,
            %s, t.headers
     FROM %s t WHERE t.id = ANY ($1) ORDER BY %s',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    outbox._event_id_of(v_q), v_q.table_oid::regclass,
    CASE WHEN run_length > 1 THEN 't.id' ELSE 't.attempt_count, t.id' END),
    'bigint[]', v_rows)
    USING v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The rest of each claimed head's run (outbox._claim with p_run > 1): the rows that follow head
-- p_heads[i] in partition p_keys[i], in id order, up to p_more per partition and p_budget in all,
-- leased with p_until and fresh tokens (lease mode) or locked (lock mode). A run is unbroken: it
-- stops before the first pending row that is not due, is leased, or is locked by another session
-- (a poisoned row is no part of the order and is stepped over, as the FIFO rule does), so the
-- rows it returns are exactly the next ones their partition delivers. The caller holds each
-- head's row (leased or locked, with its partition head locked), so no other claim can reach
-- these rows meanwhile: they are not heads.
-- Never waits: rows are locked SKIP LOCKED (a session holding one of them, say an operator's
-- open transaction, must not stall every claim), and a row skipped or changed since the search
-- ends its run there: what was leased past it is given back at once, what was locked past it is
-- not returned (the caller's COMMIT unlocks it untouched).
CREATE OR REPLACE FUNCTION outbox._claim_run(p_q outbox.queues, p_heads bigint[], p_keys text[], p_more integer,
                                             p_budget integer, p_now timestamptz, p_until timestamptz, p_mode text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table constant regclass := p_q.table_oid::regclass;
  v_deliverable constant text := 'u.sent_at IS NULL AND u.attempt_count < $3
    AND (u.next_attempt_at IS NULL OR u.next_attempt_at <= $4)
    AND (u.leased_until IS NULL OR u.leased_until <= $4)';
  v_planned bigint[];
  v_ords bigint[];
  v_taken bigint[];
  v_kept bigint[];
  v_dropped bigint[];
BEGIN
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH c AS (
       SELECT c.head, c.key, c.ord FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS c(head, key, ord)),
     run AS (
       SELECT r.id, r.ord FROM (
         SELECT n.id, c.ord,
                pg_catalog.bool_and(n.due) OVER (PARTITION BY c.ord ORDER BY n.id) AS unbroken
         FROM c CROSS JOIN LATERAL (
           SELECT t.id, (t.next_attempt_at IS NULL OR t.next_attempt_at <= $4)
                        AND (t.leased_until IS NULL OR t.leased_until <= $4) AS due
           FROM %1$s t
           WHERE t.%2$I = c.key::%3$s AND t.id > c.head AND t.sent_at IS NULL AND t.attempt_count < $3
           ORDER BY t.id LIMIT $5) n) r
       WHERE r.unbroken
       ORDER BY r.ord, r.id
       LIMIT $6),
     taken AS (
       SELECT u.id FROM %1$s u
       WHERE u.id = ANY (ARRAY(SELECT run.id FROM run)) AND %4$s
       FOR UPDATE OF u SKIP LOCKED),
     done AS (%5$s)
     SELECT (SELECT pg_catalog.array_agg(run.id ORDER BY run.ord, run.id) FROM run),
            (SELECT pg_catalog.array_agg(run.ord ORDER BY run.ord, run.id) FROM run),
            (SELECT pg_catalog.array_agg(done.id) FROM done)',
    v_table, p_q.partition_column, p_q.partition_type, v_deliverable,
    CASE WHEN p_mode = 'lease'
         THEN pg_catalog.format(
           'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $7
            FROM taken WHERE u.id = taken.id RETURNING u.id', v_table)
         ELSE 'SELECT taken.id FROM taken' END),
    'bigint[], text[], integer, timestamptz, integer, integer, timestamptz',
    'TABLE(pgdrain_planned bigint[], pgdrain_ords bigint[], pgdrain_taken bigint[])')
    INTO v_planned, v_ords, v_taken
    USING p_heads, p_keys, p_q.max_attempts, p_now, p_more, p_budget, p_until;

  IF v_planned IS NULL THEN
    RETURN '{}';
  END IF;
  IF pg_catalog.cardinality(v_planned) = COALESCE(pg_catalog.cardinality(v_taken), 0) THEN
    RETURN v_planned;
  END IF;
  -- A row of a run was skipped: its run ends before it.
  SELECT pg_catalog.array_agg(x.id ORDER BY x.ord, x.id) FILTER (WHERE NOT x.broken),
         pg_catalog.array_agg(x.id) FILTER (WHERE x.broken AND x.id = ANY (COALESCE(v_taken, '{}')))
    INTO v_kept, v_dropped
  FROM (SELECT p.id, p.ord,
               pg_catalog.bool_or(p.id <> ALL (COALESCE(v_taken, '{}')))
                 OVER (PARTITION BY p.ord ORDER BY p.id) AS broken
        FROM unnest(v_planned, v_ords) AS p(id, ord)) x;
  IF v_dropped IS NOT NULL AND p_mode = 'lease' THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s u SET lease_token = NULL, leased_until = NULL WHERE u.id = ANY ($1)', v_table)
      USING v_dropped;
  END IF;
  RETURN COALESCE(v_kept, '{}');
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
-- Finds the pending deliverable rows of a partitioned queue that no claim can reach, and (unless
-- dry_run) makes them reachable again. Partition heads, floors and parks are a cache of the queue
-- table (outbox.partition_heads); this checks the cache against the table, one key at a time:
--   missing_head     the key has a deliverable row but no head: no claim would ever look at it;
--   floor_above_row  the head's floor (below it, everything is taken to be sent or poisoned) is above
--                    the key's first deliverable row: that row would never be found;
--   parked_past_due  the head is parked (lease or backoff) more than a second past the time its first
--                    deliverable row is due. An empty head a claim parked for a second beside a
--                    producer committing rows of its key (outbox._refresh_heads) is within that
--                    second: "now" in a due time is the clock read by the check's statement, after
--                    its snapshot, so after the commit of every park it sees (a clock read before the
--                    snapshot was behind the park's own clock when that claim committed in between:
--                    it reported the designed park, counted a repair and logged a WARNING);
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
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
  -- When the repair ran (outbox.repairs); due times use the clock of the check itself (see above).
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_noted text[] := '{}';
  r record;
BEGIN
  IF dry_run IS NULL THEN
    PERFORM outbox._invalid(fn, 'dry_run must not be NULL');
  END IF;
  IF v_q.partition_column IS NULL
     OR NOT pg_catalog.pg_try_advisory_xact_lock(1885823232 + v_q.queue_id, -3)
     -- Not built yet (after a crash): claims are rebuilding them, a part each (outbox._restore_heads).
     OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id) THEN
    RETURN;
  END IF;

  -- Keys this very transaction wrote whose commit step has not run yet (a requeue_poisoned or a
  -- producer before the repair, in one transaction): that step makes or moves their heads, as a
  -- claim in the same transaction does first (outbox._claim). Not problems.
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
    SELECT COALESCE(pg_catalog.array_agg(u.k), '{}') INTO v_noted
    FROM (SELECT x.k FROM outbox.commit_notes n CROSS JOIN LATERAL pg_catalog.unnest(n.keys) AS x(k)
          WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = v_q.table_oid
          UNION
          SELECT x.k FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids, h.keys) AS x(table_oid, k)
          WHERE h.xid = pg_catalog.pg_current_xact_id() AND x.table_oid = v_q.table_oid) u;
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
         SELECT t.id, GREATEST(t.next_attempt_at, t.leased_until, pg_catalog.clock_timestamp()) AS due FROM %1$s t
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
       WHERE keys.k IS NOT NULL AND NOT n.noted AND keys.k::text <> ALL ($3)) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_noted
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
          -- The first statement's notes (a SERIALIZABLE transaction's: all) are in its hook, one entry
          -- per row (outbox._note_written).
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
-- The common core of the operators' row actions (poison_row, retry_row, dismiss_poisoned): one
-- statement that takes the rows still in the state the operator saw, changes them, and logs each
-- in outbox.operator_actions (with the session's login role, the reason and the attempt count it had); then the partitions'
-- heads follow (outbox._refresh_heads) and an idle drainer is woken when a row became claimable.
-- Fenced: a row that moved on (sent, requeued to a new id, another attempt recorded, poisoned or
-- not as the action needs) is not taken, nor one a worker delivers right now (a live lease, or a
-- lock-mode claim's row lock: SKIP LOCKED, never waiting). An expired lease's token is cleared with
-- the change, so that worker's late result is refused like any other after its lease ran out.
--   poison   pending, attempt_count = p_attempt_count: poisoned (attempt_count = max_attempts), its
--            key's later rows go past it; requeue_poisoned delivers it later, at the tail of its key.
--   retry    pending and backing off, attempt_count = p_attempt_count: due now.
--   dismiss  poisoned: never delivered, kept as history (sent_at is set, so nothing counts it as
--            pending or poisoned; purge_sent removes it with the sent rows), last_error says so.
-- poison and dismiss put their note in front of the row's last error, kept to 4000 characters in
-- all (as outbox._record keeps an error): a row poisoned, requeued and poisoned again many times
-- does not carry every earlier note.
-- Returns the ids changed.
CREATE OR REPLACE FUNCTION outbox._operator_act(p_q outbox.queues, p_action text, p_ids bigint[],
                                                p_attempt_count integer, p_reason text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
-- (enable_seqscan = off makes a plan that cannot avoid a scan cost about 1e10, past the JIT
-- thresholds: it was compiled on every call, 0.15-1.6 s.)
SET jit = off
AS $$
DECLARE
  v_note constant text := pg_catalog.format('%s by %s: %s',
    CASE p_action WHEN 'poison' THEN 'poisoned' WHEN 'dismiss' THEN 'dismissed' ELSE 'retried' END,
    session_user, p_reason);
  v_ids bigint[];
  v_keys text[];
BEGIN
  EXECUTE pg_catalog.format(
    'WITH r AS (
       SELECT t.id, t.attempt_count FROM %1$s t
       WHERE t.id = ANY ($1) AND t.sent_at IS NULL AND %4$s
         AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.clock_timestamp())
       FOR UPDATE OF t SKIP LOCKED),
     u AS (
       UPDATE %1$s t SET %5$s, leased_until = NULL, lease_token = NULL
       FROM r WHERE t.id = r.id
       RETURNING t.id, %2$s AS event_id, %3$s AS key, r.attempt_count),
     logged AS (
       INSERT INTO outbox.operator_actions (queue, action, row_id, event_id, partition_key, attempt_count, reason)
       SELECT $5, $6, u.id, u.event_id, u.key, u.attempt_count, $7 FROM u
       RETURNING row_id, partition_key)
     SELECT pg_catalog.array_agg(l.row_id ORDER BY l.row_id), pg_catalog.array_agg(DISTINCT l.partition_key)
     FROM logged l',
    p_q.table_oid,
    outbox._event_id_of(p_q),
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END,
    CASE p_action
      WHEN 'poison' THEN 't.attempt_count = $2 AND t.attempt_count < $3'
      WHEN 'retry' THEN 't.attempt_count = $2 AND t.attempt_count < $3 AND t.next_attempt_at > pg_catalog.clock_timestamp()'
      ELSE 't.attempt_count >= $3' END,
    CASE p_action
      WHEN 'poison' THEN 'attempt_count = $3, next_attempt_at = NULL, last_error = pg_catalog.left($4 || COALESCE('' (last error: '' || t.last_error || '')'', ''''), 4000)'
      WHEN 'retry' THEN 'next_attempt_at = NULL'
      ELSE 'sent_at = pg_catalog.now(), next_attempt_at = NULL, last_error = pg_catalog.left($4 || COALESCE('' (last error: '' || t.last_error || '')'', ''''), 4000)' END)
    INTO v_ids, v_keys
    USING p_ids, p_attempt_count, p_q.max_attempts, v_note, p_q.queue, p_action, p_reason;
  IF v_ids IS NULL THEN
    RETURN '{}';
  END IF;
  RAISE LOG 'pgdrain: % % row(s) % of queue %: %', session_user,
    CASE p_action WHEN 'poison' THEN 'poisoned' WHEN 'dismiss' THEN 'dismissed' ELSE 'retried' END,
    v_ids, p_q.queue, COALESCE(p_reason, '(no reason given)');
  IF p_action = 'poison' THEN
    PERFORM outbox._keep_poisoned(p_q, v_ids);
  END IF;
  IF p_q.partition_column IS NOT NULL AND p_action <> 'dismiss' THEN
    -- Heads another transaction holds (a lock-mode batch delivering the key's head row) are
    -- skipped, never waited for: that batch moves its head when it settles, and a claim that finds
    -- a head at a row no longer deliverable refreshes it.
    SELECT pg_catalog.array_agg(k) INTO v_keys
    FROM pg_catalog.unnest(pg_catalog.array_remove(v_keys, NULL)) AS k
    WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads h WHERE h.queue_id = p_q.queue_id AND h.partition_key = k)
       OR k IN (SELECT h.partition_key FROM outbox.partition_heads h
                WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
                FOR NO KEY UPDATE SKIP LOCKED);
    PERFORM outbox._refresh_heads(p_q, v_keys);
  END IF;
  IF p_action = 'retry' OR p_q.partition_column IS NOT NULL AND p_action = 'poison' THEN
    -- Claimable now: the row itself, or the row behind a skipped head.
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- One row of gauges for metrics. Exact counts from one pass over the pending rows through the
-- (attempt_count, id) partial index: cost follows the pending backlog, never the sent history.
-- pending = unsent and not poisoned; ready = pending, due and not leased; leased = lease live;
-- backing_off = pending with next_attempt_at in the future; poisoned = attempt_count >= max.
-- The oldest pending row is the oldest with a finite created_at: a producer may write 'infinity'
-- or '-infinity', which made the subtraction fail (22008) for every caller of stats.
CREATE OR REPLACE FUNCTION outbox.stats(queue text)
RETURNS TABLE(pending bigint, ready bigint, leased bigint, backing_off bigint, poisoned bigint,
              oldest_pending_at timestamptz, oldest_pending_age interval)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('stats', queue);
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1
                               AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= pg_catalog.now())
                               AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.now())),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1 AND t.leased_until > pg_catalog.now()),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1 AND t.next_attempt_at > pg_catalog.now()),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count >= $1),
            pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1 AND pg_catalog.isfinite(t.created_at)),
            pg_catalog.now() - pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1 AND pg_catalog.isfinite(t.created_at))
     FROM %s t WHERE t.sent_at IS NULL AND t.attempt_count >= 0', v_q.table_oid::regclass)
    USING v_q.max_attempts;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The max_partitions partitions whose oldest pending row is older than older_than, oldest first,
-- with their head and why it is not moving. Reads outbox.partition_heads, so its cost follows the
-- number of partitions with pending work, not the backlog. A key whose head points at a row that is
-- gone is listed with its oldest pending row.
CREATE OR REPLACE FUNCTION outbox.wedged_partitions(queue text, older_than interval, max_partitions integer DEFAULT 10)
RETURNS TABLE(partition_key text, head_id bigint, head_attempt_count integer, head_last_error text,
              oldest_pending_at timestamptz, pending bigint, reason text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'wedged_partitions';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF v_q.partition_column IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('queue %s has no partition column', v_q.queue));
  END IF;
  PERFORM outbox._check_span(fn, 'older_than', older_than);
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  -- Further back than the clock can subtract (22008 from now() - older_than).
  IF older_than > interval '1000 years' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('older_than must be at most 1000 years, got %s', older_than));
  END IF;
  IF max_partitions IS NULL OR max_partitions < 1 OR max_partitions > 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_partitions must be between 1 and 10000, got %s', COALESCE(max_partitions::text, 'NULL')));
  END IF;
  -- A head whose row is gone (deleted by the application, or made sent by hand) is not moved by
  -- claims until its park ends or the repair pass finds it, and its key waits meanwhile: listed
  -- with the key's oldest pending row, and says so (an inner join on the head's row left out exactly
  -- that stuck key).
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT h.partition_key, COALESCE(t.id, f.id), COALESCE(t.attempt_count, f.attempt_count),
            CASE WHEN t.id IS NOT NULL THEN t.last_error ELSE f.last_error END, COALESCE(t.created_at, f.created_at),
            (SELECT pg_catalog.count(*) FROM %1$s p
             WHERE p.%2$I = h.partition_key::%3$s AND p.sent_at IS NULL AND p.attempt_count < $2),
            CASE
              WHEN t.id IS NULL THEN ''its head points at row '' || h.head_id
                   || '', which is gone or sent: the next claim to reach the head, or the repair pass (outbox.repair), moves it on''
              WHEN t.leased_until > pg_catalog.now() THEN ''leased until '' || t.leased_until
              WHEN t.next_attempt_at > pg_catalog.now() THEN ''backing off until '' || t.next_attempt_at
                   || '' after '' || t.attempt_count || '' attempts''
              ELSE ''ready, waiting for a drainer'' END
     FROM outbox.partition_heads h
     LEFT JOIN %1$s t ON t.id = h.head_id AND t.sent_at IS NULL
     LEFT JOIN LATERAL (SELECT p.id, p.attempt_count, p.last_error, p.created_at FROM %1$s p
                        WHERE t.id IS NULL AND h.head_id IS NOT NULL
                          AND p.%2$I = h.partition_key::%3$s AND p.sent_at IS NULL AND p.attempt_count < $2
                        ORDER BY p.id LIMIT 1) f ON true
     WHERE h.queue_id = $1 AND COALESCE(t.created_at, f.created_at) < pg_catalog.now() - $3
     ORDER BY COALESCE(t.created_at, f.created_at)
     LIMIT $4', v_q.table_oid::regclass, v_q.partition_column, v_q.partition_type)
    USING v_q.queue_id, v_q.max_attempts, older_than, max_partitions;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- When a claim should next be tried on a queue although no NOTIFY arrives: the earliest end of a
-- lease or backoff that parks work (a time at or before now() means "claim now"), or NULL when
-- nothing is parked. A worker that sleeps until then (or a NOTIFY) never waits for its poll
-- fallback. Partitioned queues: the parked heads, one index probe (a head parked empty for a
-- second while a producer of its key commits is included, so that row is not left waiting).
-- Unpartitioned queues: the first 1,000 pending rows in claim order, through the claim index
-- (bounded; rows further back are found by the claim that follows).
CREATE OR REPLACE FUNCTION outbox.next_due(queue text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('next_due', queue);
  v_at timestamptz;
BEGIN
  IF v_q.partition_column IS NOT NULL THEN
    SELECT h.parked_until INTO v_at FROM outbox.partition_heads h
    WHERE h.queue_id = v_q.queue_id AND h.parked_until IS NOT NULL
    ORDER BY h.parked_until LIMIT 1;
    -- Heads of leased rows are not parked (a claim writes only the row): their leases' ends, from
    -- the first 1,000 ready heads (when a claim found nothing, the ready heads are the ones in flight).
    RETURN LEAST(v_at, outbox._first_lease_end(v_q, 1000));
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.min(GREATEST(s.next_attempt_at, s.leased_until))
     FROM (SELECT t.next_attempt_at, t.leased_until FROM %s t
           WHERE t.sent_at IS NULL AND t.attempt_count < $1
           ORDER BY t.attempt_count, t.id LIMIT 1000) s', v_q.table_oid::regclass)
    INTO v_at USING v_q.max_attempts;
  RETURN v_at;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The earliest end of a live lease among the rows the first p_limit ready heads of a partitioned
-- queue point at (NULL: none). Claims do not park the heads of the rows they lease, so this is how
-- outbox.next_due learns when an in-flight row comes back if its worker never answers.
CREATE OR REPLACE FUNCTION outbox._first_lease_end(p_q outbox.queues, p_limit integer)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_at timestamptz;
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.min(t.leased_until)
     FROM (SELECT h.head_id FROM outbox.partition_heads h
           WHERE h.queue_id = $1 AND h.parked_until IS NULL
           ORDER BY h.attempt_count, h.head_id LIMIT $2) h
     JOIN %s t ON t.id = h.head_id
     WHERE t.sent_at IS NULL AND t.leased_until > pg_catalog.clock_timestamp()', p_q.table_oid::regclass)
    INTO v_at USING p_q.queue_id, p_limit;
  RETURN v_at;
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
  SELECT '0.1.0'::text, 54;
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
ALTER FUNCTION outbox.heads_rebuild(text) SECURITY DEFINER;
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
-- Whether claims are rebuilding a queue's heads after a crash (00051): pgdrain check, the drainer's
-- gauges, the console.
GRANT EXECUTE ON FUNCTION outbox.heads_rebuild(text) TO pgdrain_worker, pgdrain_operator, pgdrain_reader;

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
