-- +goose Up
-- +goose StatementBegin
-- Gives a queue table its event_id column (the event's stable identity, DESIGN "Identity and order
-- of an event") when it has none: nullable and with a default for new rows, so adding it is a
-- catalog change, not a rewrite of a large table under an exclusive lock. Rows written before have
-- NULL, and the claims hand out a uuid derived from the queue and id instead (outbox._event_id_of).
-- An existing column of another type is refused.
CREATE OR REPLACE FUNCTION outbox._add_event_id(p_rel regclass)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_type text;
  v_default text;
BEGIN
  SELECT pg_catalog.format_type(a.atttypid, a.atttypmod), pg_catalog.pg_get_expr(d.adbin, d.adrelid)
    INTO v_type, v_default
  FROM pg_catalog.pg_attribute a
  LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attrelid = p_rel AND a.attname = 'event_id' AND NOT a.attisdropped;
  IF NOT FOUND THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN event_id uuid', p_rel);
  ELSIF v_type <> 'uuid' THEN
    PERFORM outbox._invalid('create_queue', pg_catalog.format(
      'queue table %s has an event_id column of type %s; pgdrain needs uuid (the event''s stable identity)', p_rel, v_type));
  END IF;
  IF v_default IS NULL THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN event_id SET DEFAULT pg_catalog.gen_random_uuid()', p_rel);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Applies the wake notes producers left for a queue (outbox.partition_wakes, see
-- outbox.tg_queue__commit): a committed row of the note's key whose head a claim held at the
-- time. Each noted partition gets what the producer could not write itself: a head if it has
-- none, an empty head pointed at the row and woken, a floor lowered to the row. Notes of a head
-- that is still held stay for a later claim; a bounded number per call, oldest first.
-- Returns the keys it applied, for the caller to refresh.
CREATE OR REPLACE FUNCTION outbox._apply_wakes(p_q outbox.queues)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_notes tid[];
  v_keys text[];
  v_lows bigint[];
  v_done text[];
BEGIN
  SELECT pg_catalog.array_agg(w.ctid) INTO v_notes
  FROM (SELECT x.ctid FROM outbox.partition_wakes x WHERE x.queue_id = p_q.queue_id
        LIMIT 256 FOR UPDATE SKIP LOCKED) w;
  IF v_notes IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT pg_catalog.array_agg(s.k ORDER BY s.k), pg_catalog.array_agg(s.lo ORDER BY s.k)
    INTO v_keys, v_lows
  FROM (SELECT w.partition_key AS k, pg_catalog.min(w.low_id) AS lo FROM outbox.partition_wakes w
        WHERE w.ctid = ANY (v_notes) GROUP BY 1) s;

  -- Heads we can lock now (or that do not exist: made here) take the note; the others wait.
  WITH held AS (
    SELECT h.partition_key FROM outbox.partition_heads h
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
    FOR NO KEY UPDATE SKIP LOCKED),
  fixed AS (
    UPDATE outbox.partition_heads h
    SET head_id = COALESCE(h.head_id, u.lo),
        parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
        floor_id = LEAST(h.floor_id, u.lo)
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k AND u.k IN (SELECT held.partition_key FROM held)
    RETURNING h.partition_key),
  made AS (
    INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
    -- Floor 0: notes of the key beyond this call's may hold smaller ids.
    SELECT p_q.queue_id, u.k, u.lo, 0
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                      WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
    ORDER BY u.k
    ON CONFLICT (queue_id, partition_key) DO NOTHING
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(k) INTO v_done
  FROM (SELECT fixed.partition_key AS k FROM fixed UNION ALL SELECT made.partition_key FROM made) d;

  DELETE FROM outbox.partition_wakes w
  WHERE w.ctid = ANY (v_notes) AND w.partition_key = ANY (v_done);
  RETURN v_done;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Exponential backoff with equal jitter: the n-th retry waits between half and all of
-- min * 2^(n-1), capped at max, and never less than min.
CREATE OR REPLACE FUNCTION outbox._backoff(p_attempt integer, p_min interval, p_max interval)
RETURNS interval
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT GREATEST(p_min, d / 2 + d / 2 * pg_catalog.random())
  FROM (SELECT LEAST(p_max, p_min * pg_catalog.power(2, LEAST(GREATEST(p_attempt, 1) - 1, 30))) AS d) s;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- batch_size must be 1..10000: a claim larger than that holds too many rows in one statement.
CREATE OR REPLACE FUNCTION outbox._check_batch_size(p_function text, p_batch_size integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_batch_size IS NULL OR p_batch_size < 1 OR p_batch_size > 10000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'batch_size must be between 1 and 10000, got %s', COALESCE(p_batch_size::text, 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates a caller-chosen time of a row's next attempt (enqueue's deliver_at, a worker's
-- retry_at) against the queue's max_delay: at most max_delay after the clock, so that no producer
-- or peer can park a row (and on a partitioned queue every later event of its key) for ever. NULL
-- elements are fine (no time given). The queue table's CHECK pgdrain_next_attempt_at_within_max_delay
-- (outbox._guard_next_attempt_at) holds a plain INSERT or UPDATE to the same bound; this check comes
-- first so that a call names its argument (22023) instead of a constraint. p_elements: name the
-- element of an array argument in the message.
CREATE OR REPLACE FUNCTION outbox._check_delay(p_function text, p_argument text, p_q outbox.queues,
                                               p_times timestamptz[], p_elements boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_bad timestamptz;
  v_n bigint;
BEGIN
  IF p_times IS NULL THEN
    RETURN;
  END IF;
  SELECT u.at, u.n INTO v_bad, v_n
  FROM unnest(p_times) WITH ORDINALITY AS u(at, n)
  WHERE u.at > pg_catalog.clock_timestamp() + p_q.max_delay
  LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      '%s must be at most the queue''s max_delay (%s) from now, got %s%s', p_argument, p_q.max_delay, v_bad,
      CASE WHEN p_elements THEN pg_catalog.format(' (element %s)', v_n) ELSE '' END));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A lease must be positive and at most one day: longer leases only hide crashed workers.
CREATE OR REPLACE FUNCTION outbox._check_lease(p_function text, p_lease interval)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '1 day' THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'lease must be greater than 0 and at most 1 day, got %s', COALESCE(p_lease::text, 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- An array argument must be one-dimensional (or empty, or NULL: other checks decide about those).
-- A multidimensional array would be flattened by unnest() and refused by array_position() with a
-- raw 0A000, so it is refused here, naming the argument. Takes array_ndims() of the argument, so
-- one function serves arrays of every type.
CREATE OR REPLACE FUNCTION outbox._check_one_dimension(p_function text, p_argument text, p_ndims integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_ndims > 1 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      '%s must be a one-dimensional array, got %s dimensions', p_argument, p_ndims));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates the parallel arrays of a batch of results: one-dimensional, same lengths, at most
-- 10000, no NULL or duplicate id, every outcome one of 'sent', 'transient', 'permanent'.
CREATE OR REPLACE FUNCTION outbox._check_outcomes(p_function text, p_ids bigint[], p_outcomes text[],
                                                  p_errors text[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_bad text;
BEGIN
  IF p_ids IS NULL THEN
    PERFORM outbox._invalid(p_function, 'ids must not be NULL');
  END IF;
  PERFORM outbox._check_one_dimension(p_function, 'ids', pg_catalog.array_ndims(p_ids));
  PERFORM outbox._check_one_dimension(p_function, 'outcomes', pg_catalog.array_ndims(p_outcomes));
  PERFORM outbox._check_one_dimension(p_function, 'errors', pg_catalog.array_ndims(p_errors));
  IF pg_catalog.cardinality(p_ids) > 10000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'ids must have at most 10000 elements, got %s', pg_catalog.cardinality(p_ids)));
  END IF;
  IF p_outcomes IS NULL OR pg_catalog.cardinality(p_outcomes) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'outcomes must have as many elements as ids (%s), got %s', pg_catalog.cardinality(p_ids),
      COALESCE(pg_catalog.cardinality(p_outcomes)::text, 'NULL')));
  END IF;
  IF p_errors IS NOT NULL AND pg_catalog.cardinality(p_errors) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'errors must be NULL or have as many elements as ids (%s), got %s',
      pg_catalog.cardinality(p_ids), pg_catalog.cardinality(p_errors)));
  END IF;
  IF pg_catalog.array_position(p_ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(p_function, 'ids must not contain NULL');
  END IF;
  IF (SELECT pg_catalog.count(DISTINCT x) FROM pg_catalog.unnest(p_ids) x) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, 'ids must be distinct');
  END IF;
  SELECT o INTO v_bad FROM pg_catalog.unnest(p_outcomes) o
  WHERE o IS NULL OR o NOT IN ('sent', 'transient', 'permanent') LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'outcome must be ''sent'', ''transient'' or ''permanent'', got %s',
      COALESCE(pg_catalog.quote_literal(v_bad), 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates an operator's reason for an action on rows: a non-blank text of at most 1000
-- characters, recorded in the row's last_error and in outbox.operator_actions.
CREATE OR REPLACE FUNCTION outbox._check_reason(p_function text, p_reason text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_reason IS NULL OR pg_catalog.btrim(p_reason) = '' OR pg_catalog.length(p_reason) > 1000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'reason must be a non-blank text of at most 1000 characters, got %s',
      COALESCE(pg_catalog.quote_literal(pg_catalog.left(p_reason, 50)), 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates the retry_at argument of apply_result(s) and settle_locked: a caller-chosen time for a
-- row's next attempt (a peer's Retry-After), given only with the outcome 'transient', finite. NULL
-- (the whole array, or one element) keeps the queue's exponential backoff.
CREATE OR REPLACE FUNCTION outbox._check_retry_at(p_function text, p_ids bigint[], p_outcomes text[],
                                                  p_retry_at timestamptz[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_bad integer;
BEGIN
  IF p_retry_at IS NULL THEN
    RETURN;
  END IF;
  PERFORM outbox._check_one_dimension(p_function, 'retry_at', pg_catalog.array_ndims(p_retry_at));
  IF pg_catalog.cardinality(p_retry_at) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be NULL or have as many elements as ids (%s), got %s',
      pg_catalog.cardinality(p_ids), pg_catalog.cardinality(p_retry_at)));
  END IF;
  SELECT u.n INTO v_bad FROM unnest(p_retry_at, p_outcomes) WITH ORDINALITY AS u(at, outcome, n)
  WHERE u.at IS NOT NULL AND u.outcome IS DISTINCT FROM 'transient' LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be NULL unless the outcome is ''transient'' (element %s)', v_bad));
  END IF;
  SELECT u.n INTO v_bad FROM unnest(p_retry_at) WITH ORDINALITY AS u(at, n)
  WHERE u.at IN ('infinity', '-infinity') LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be a finite time (element %s)', v_bad));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- run_length must be 1..1000: how many rows of one partition a claim takes (1 = the seed's claim).
CREATE OR REPLACE FUNCTION outbox._check_run_length(p_function text, p_run_length integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_run_length IS NULL OR p_run_length < 1 OR p_run_length > 1000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'run_length must be between 1 and 1000, got %s', COALESCE(p_run_length::text, 'NULL')));
  END IF;
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

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
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
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started, false);
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

    -- Lease mode leases what it locks in the same statement (one statement planned, not two).
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
       SELECT pg_catalog.array_agg(claimed.id), pg_catalog.array_agg(claimed.key::text) FROM claimed',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type,
      CASE WHEN p_mode = 'lease'
           THEN pg_catalog.format(
             -- By the version picked locked (a TID scan), not by id: a second index probe per row.
             -- A version newer than the statement's snapshot (a concurrent release committed
             -- between the snapshot and the lock) is not leased; its head counts as stale below.
             -- With its table: a ctid names a row only within one table, and a queue table
             -- partitioned by range has one per partition (each with its own (0,1)).
             'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $6
              FROM picked WHERE u.ctid = picked.version AND u.tableoid = picked.version_table
              RETURNING u.id, picked.key', v_table)
           ELSE 'SELECT picked.id, picked.key FROM picked' END),
      'bigint[], integer, bigint[], text[], timestamptz, timestamptz', 'TABLE(pgdrain_ids bigint[], pgdrain_keys text[])')
      INTO v_ids, v_claimed_keys USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now, v_until;

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
          pg_catalog.round(v_rows_per_head, 2) || ',' || v_run_hint_since, false);
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
-- Lock mode (seed 001's claim transaction): the same deliverable rows as claim_batch, locked
-- FOR UPDATE SKIP LOCKED by the caller's open transaction until it ends. No lease is written: the
-- row lock is the fence, and settle_locked records outcomes in the same transaction, so each row
-- is written once. The claimed ids are remembered in a transaction-local setting for settle_locked.
--
-- The body of claim_locked and claim_locked_runs (fn names the caller in errors).
-- run_length > 1 (claim_locked_runs): as claim_runs, each partition's head with the
-- rows that follow it, up to run_length per partition and batch_size in all, in id order; settle
-- what was applied, a partition's rows up to its first failure (the rest stay untouched).
CREATE OR REPLACE FUNCTION outbox._claim_locked(fn text, queue text, batch_size integer, run_length integer)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_setting text;
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  PERFORM outbox._check_run_length(fn, run_length);
  -- _claim leaves out the rows this transaction already holds (SKIP LOCKED does not skip our own
  -- locks), so a row is never handed out twice.
  v_ids := outbox._claim(v_q, batch_size, NULL, 'lock', run_length);
  v_setting := 'pgdrain.held_' || v_q.queue_id;
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    RETURN;  -- not even a query: id = ANY('{}') would let the planner pick any partial index
  END IF;
  PERFORM pg_catalog.set_config(v_setting,
    pg_catalog.concat_ws(',', NULLIF(pg_catalog.current_setting(v_setting, true), ''),
                         pg_catalog.array_to_string(v_ids, ',')), true);
  -- With its plan kept (outbox._prepared): planned on every call, reading back a batch of 32 cost
  -- 3x what it does kept (145-205 -> 49 µs per call).
  RETURN QUERY EXECUTE outbox._prepared(v_q.queue_id, pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.created_at, %s, t.headers
     FROM %s t WHERE t.id = ANY ($1) ORDER BY %s',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    outbox._event_id_of(v_q), v_q.table_oid::regclass,
    CASE WHEN run_length > 1 THEN 't.id' ELSE 't.attempt_count, t.id' END),
    'bigint[]', 'TABLE(pgdrain_id bigint, pgdrain_event_type text, pgdrain_payload jsonb, pgdrain_partition_key text, '
    'pgdrain_attempt_count integer, pgdrain_created_at timestamptz, pgdrain_event_id uuid, pgdrain_headers jsonb)')
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
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether a producer of a queue that notifies 'when_waiting' (outbox.set_notify) must NOTIFY: a
-- drainer said it waits for one (outbox.drainer_waits) and has not been woken since. Takes the
-- queue's notify gate shared, held until the transaction ends: a drainer marks itself waiting only
-- while no producer holds it, so a producer that found no drainer waiting commits (its rows
-- visible) before any drainer can start to wait, and that drainer's claim after marking sees them.
-- A shared lock never waits for another producer; it waits for a drainer only while one marks
-- itself, which is one setval inside outbox.drainer_waits (never a drainer's transaction or
-- latency). Queues that notify 'always' answer true without a lock.
-- A producer's transaction that set pgdrain.notify to 'off' (SET LOCAL pgdrain.notify = off) never
-- notifies: a transaction that executed NOTIFY can not be prepared (PREPARE TRANSACTION, two-phase
-- commit), so such producers opt out, and drainers find their rows by their poll fallback.
-- Arguments: the queue, and its drainer_waits_q<queue_id> sequence.
CREATE OR REPLACE FUNCTION outbox._drainer_waits(p_q outbox.queues)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF pg_catalog.current_setting('pgdrain.notify', true) = 'off' THEN
    RETURN false;
  END IF;
  IF p_q.notify = 'always' THEN
    RETURN true;
  END IF;
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_q.queue_id, -4);
  RETURN COALESCE(pg_catalog.pg_sequence_last_value(
                    pg_catalog.to_regclass('outbox.drainer_waits_q' || p_q.queue_id)), 0)
         > (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Drops every function of schema outbox whose name matches the regular expression p_name (the
-- functions made per queue: kept statements, late-rows functions, a dropped queue's all) and
-- returns how many.
CREATE OR REPLACE FUNCTION outbox._drop_functions(p_name text)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_fn regprocedure;
  v_dropped integer := 0;
BEGIN
  FOR v_fn IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ p_name
  LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_fn);
    v_dropped := v_dropped + 1;
  END LOOP;
  RETURN v_dropped;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The insert behind enqueue and enqueue_event (p_function names the caller in errors): validates
-- the event and inserts it, returning its id (provisional until COMMIT on a partitioned queue, see
-- DESIGN "Identity and order of an event") and its event_id. deliver_at delays the first attempt,
-- at most the queue's max_delay (it is the row's next_attempt_at; on a partitioned queue it holds back the key's later events
-- too, which keep their order). headers (an object of strings) travel with the event to the sink.
CREATE OR REPLACE FUNCTION outbox._enqueue(p_function text, p_queue text, p_event_type text, p_payload jsonb,
                                           p_partition_key text, p_deliver_at timestamptz, p_headers jsonb,
                                           p_event_id uuid)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(p_function, p_queue);
  v_key_column text := '';
  v_key_value text := '';
BEGIN
  IF p_event_type IS NULL OR pg_catalog.btrim(p_event_type) = '' THEN
    PERFORM outbox._invalid(p_function, 'event_type must be a non-empty string');
  END IF;
  IF p_payload IS NULL THEN
    PERFORM outbox._invalid(p_function, 'payload must not be NULL (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF pg_catalog.jsonb_typeof(p_payload) = 'null' THEN
    PERFORM outbox._invalid(p_function, 'payload must not be JSON null (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF p_deliver_at IN ('infinity', '-infinity') THEN
    PERFORM outbox._invalid(p_function, 'deliver_at must be a finite time (NULL: deliver now)');
  END IF;
  PERFORM outbox._check_delay(p_function, 'deliver_at', v_q, ARRAY[p_deliver_at], false);
  IF p_headers IS NOT NULL AND (pg_catalog.jsonb_typeof(p_headers) <> 'object'
                                OR pg_catalog.jsonb_path_exists(p_headers, '$.* ? (@.type() != "string")')) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'headers must be NULL or a JSON object whose values are strings, got %s', pg_catalog.left(p_headers::text, 200)));
  END IF;
  IF v_q.partition_column IS NULL THEN
    IF p_partition_key IS NOT NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be NULL: queue %s has no partition column', v_q.queue));
    END IF;
  ELSE
    IF p_partition_key IS NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must not be NULL: queue %s is partitioned by %s', v_q.queue, v_q.partition_column));
    END IF;
    IF pg_catalog.btrim(p_partition_key) = '' THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be a non-empty string, got %s', pg_catalog.quote_literal(p_partition_key)));
    END IF;
    v_key_column := pg_catalog.format(', %I', v_q.partition_column);
    v_key_value := pg_catalog.format(', $6::%s', v_q.partition_type);
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO %s AS t (event_type, payload, next_attempt_at, headers, event_id%s)
     VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.gen_random_uuid())%s)
     RETURNING t.id, t.event_id',
    v_q.table_oid::regclass, v_key_column, v_key_value)
    USING p_event_type, p_payload, p_deliver_at, p_headers, p_event_id, p_partition_key;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The SQL expression, over a queue table aliased t, of a row's event_id: the column, or for a row
-- written before its table had the column (adopted, or registered before migration 00007) a uuid
-- derived from the queue and the row's id, the same on every claim.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox._event_id_of(p_q outbox.queues)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN pg_catalog.format('COALESCE(t.event_id, pg_catalog.md5(%L || t.id::text)::uuid)', p_q.queue || '/');
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
-- Drops every queue's kept statements (the functions outbox._prepared makes, _q<queue_id>_<hash>)
-- and returns how many: each is made again by the first call that needs it. A kept statement is
-- named for its text, so one a migration changed is never called again but stays until drop_queue;
-- a migration that changes statements calls this in its after-step. A claim that looked one up
-- just before it was dropped fails once ("function does not exist") and is retried by its drainer.
CREATE OR REPLACE FUNCTION outbox._forget_kept_statements()
RETURNS integer
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT outbox._drop_functions('^_q[0-9]+_[0-9a-f]{24}$');
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The queue table's CHECK pgdrain_next_attempt_at_within_max_delay: next_attempt_at at most the
-- queue's max_delay after the clock when a row is written, so that a plain INSERT (by a role
-- granted next_attempt_at) can not park a key for ever either; the functions check the same bound
-- first, naming their argument (outbox._check_delay). The bound is read from the clock when the row
-- is written, so a row that met it still meets it later: an UPDATE of it never fails for it, nor
-- does a restore (pg_restore loads the rows after the time they were written). Made again when
-- max_delay changes (p_replace), NOT VALID unless the table is new (p_validate): rows written under
-- a larger limit keep their time (and nothing updates a parked row without writing a new one).
-- Backoffs stay within it: create_queue requires max_delay >= backoff_max.
CREATE OR REPLACE FUNCTION outbox._guard_next_attempt_at(p_rel regclass, p_max_delay interval, p_replace boolean,
                                                         p_validate boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_name constant text := 'pgdrain_next_attempt_at_within_max_delay';
BEGIN
  IF p_replace THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I', p_rel, v_name);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conrelid = p_rel AND k.conname = v_name) THEN
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s ADD CONSTRAINT %I CHECK (next_attempt_at IS NULL OR next_attempt_at <= pg_catalog.clock_timestamp() + %L::interval)%s',
      p_rel, v_name, p_max_delay, CASE WHEN p_validate THEN '' ELSE ' NOT VALID' END);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- What a queue table enforces on its writers, (re)applied by create_queue and by migration 00004 to
-- queues registered before it. Idempotent.
--  * CHECK constraints that name their rule: pgdrain_attempt_count_not_negative,
--    pgdrain_payload_not_json_null (outbox._payload_check), pgdrain_headers_string_object
--    (headers: NULL or an object of strings) and, for a string partition column,
--    pgdrain_partition_key_not_empty (not empty or blank): a plain INSERT is held to the rules
--    enqueue checks.
--    On an adopted table (p_adopted) they are NOT VALID (no scan of the history), and one that a
--    pending row already breaks is left out with a WARNING: a CHECK is tested on every UPDATE, so it
--    would make that row's claim fail forever. Pending rows are read once, through the claim index.
--  * pgdrain_producer (when the role exists) may INSERT only the event's columns (every column but
--    the ones that steer delivery: id, attempt_count, next_attempt_at, sent_at, leased_until,
--    lease_token, last_error), SELECT (id, event_id) for RETURNING, and use the id's sequence.
--  * The AFTER TRUNCATE trigger pgdrain_truncate (outbox.tg_queue__truncate).
CREATE OR REPLACE FUNCTION outbox._guard_queue_table(p_rel regclass, p_partition_column text,
                                                     p_adopted boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_check record;
  v_broken boolean;
  v_columns text;
  v_sequence text;
BEGIN
  -- A payload check made before 00025 reads the whole payload on every UPDATE: replaced, NOT VALID
  -- (no scan: the rows were checked by the old expression, which says the same).
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
             WHERE k.conrelid = p_rel AND k.conname = 'pgdrain_payload_not_json_null'
               AND pg_catalog.pg_get_constraintdef(k.oid) NOT LIKE '%pg_column_size%') THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT pgdrain_payload_not_json_null, '
                              'ADD CONSTRAINT pgdrain_payload_not_json_null CHECK (%s) NOT VALID',
                              p_rel, outbox._payload_check());
  END IF;
  FOR v_check IN
    SELECT c.name, c.expr
    FROM (VALUES ('pgdrain_attempt_count_not_negative', 'attempt_count >= 0'),
                 ('pgdrain_payload_not_json_null', outbox._payload_check()),
                 ('pgdrain_headers_string_object', 'headers IS NULL OR pg_catalog.jsonb_typeof(headers) = ''object'' '
                   || 'AND NOT pg_catalog.jsonb_path_exists(headers, ''$.* ? (@.type() != "string")'')')) AS c(name, expr)
    UNION ALL
    SELECT 'pgdrain_partition_key_not_empty', pg_catalog.format('pg_catalog.btrim(%I::text) <> ''''', p_partition_column)
    FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
    WHERE a.attrelid = p_rel AND a.attname = p_partition_column AND NOT a.attisdropped
      AND t.typcategory = 'S'
  LOOP
    CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                          WHERE k.conrelid = p_rel AND k.conname = v_check.name);
    IF p_adopted THEN
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND NOT (%s))',
                                p_rel, v_check.expr) INTO STRICT v_broken;
      IF v_broken THEN
        RAISE WARNING 'pgdrain: % not added to %: pending rows break it (it would make their claim fail); run create_queue again once they are delivered',
          v_check.name, p_rel;
        CONTINUE;
      END IF;
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%s)%s', p_rel, v_check.name,
                              v_check.expr, CASE WHEN p_adopted THEN ' NOT VALID' ELSE '' END);
  END LOOP;

  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'pgdrain_producer') THEN
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO v_columns
    FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = p_rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
      AND a.attname NOT IN ('id', 'attempt_count', 'next_attempt_at', 'sent_at', 'leased_until',
                            'lease_token', 'last_error');
    -- Revoking the table-level privilege also revokes every column-level one.
    EXECUTE pg_catalog.format('REVOKE INSERT ON %s FROM pgdrain_producer', p_rel);
    EXECUTE pg_catalog.format('GRANT INSERT (%s), SELECT (id, event_id) ON %s TO pgdrain_producer', v_columns, p_rel);
    v_sequence := COALESCE(outbox._id_sequence(p_rel)::text,
                           pg_catalog.pg_get_serial_sequence(p_rel::text, 'id'));
    IF v_sequence IS NOT NULL THEN
      EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %s TO pgdrain_producer', v_sequence);
    END IF;
  END IF;

  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', p_rel);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT
       EXECUTE FUNCTION outbox.tg_queue__truncate()', p_rel);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The sequence a queue table's id comes from, or NULL: the identity's sequence, or the one sequence
-- a default of exactly nextval('that_sequence') uses (serial, or a sequence that is not OWNED BY the
-- column: found through the default's dependency in pg_depend, which pg_get_serial_sequence does not
-- follow). Only an ascending sequence counts. The commit step renumbers late rows with nextval of
-- it (outbox.queues.id_sequence), so a partitioned queue needs one (create_queue refuses otherwise).
CREATE OR REPLACE FUNCTION outbox._id_sequence(p_rel regclass)
RETURNS regclass
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_attnum smallint;
  v_identity "char";
  v_seq regclass;
  v_expr text;
BEGIN
  SELECT a.attnum, a.attidentity INTO v_attnum, v_identity
  FROM pg_catalog.pg_attribute a
  WHERE a.attrelid = p_rel AND a.attname = 'id' AND NOT a.attisdropped;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF v_identity <> '' THEN
    v_seq := pg_catalog.pg_get_serial_sequence(p_rel::text, 'id')::regclass;
  ELSE
    SELECT d.refobjid::regclass, pg_catalog.pg_get_expr(ad.adbin, ad.adrelid) INTO v_seq, v_expr
    FROM pg_catalog.pg_attrdef ad
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid = ad.oid
                               AND d.refclassid = 'pg_catalog.pg_class'::regclass
    JOIN pg_catalog.pg_class s ON s.oid = d.refobjid AND s.relkind = 'S'
    WHERE ad.adrelid = p_rel AND ad.adnum = v_attnum
    ORDER BY d.refobjid
    LIMIT 1;
    -- Anything but a bare nextval of it (nextval(...) * 2, coalesce of two sequences) does not
    -- give ids in the sequence's order.
    IF v_expr IS DISTINCT FROM pg_catalog.format('nextval(%L::regclass)', v_seq::text) THEN
      v_seq := NULL;
    END IF;
  END IF;
  IF v_seq IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_sequence s WHERE s.seqrelid = v_seq AND s.seqincrement > 0) THEN
    v_seq := NULL;
  END IF;
  RETURN v_seq;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue the two hints its claims share (see outbox._claim), as UNLOGGED
-- sequences: a sequence is not versioned, so moving it on every claim leaves no dead tuple behind
-- for anyone to walk, whatever holds the xmin horizon back, and costs no WAL; after a crash both
-- start again from nothing, which only costs one scan from the front.
--   outbox.claim_front_q<queue_id>  when (epoch milliseconds) a claim last searched the ready heads
--                                   from the front: one claim per second per queue does;
--   outbox.claim_start_q<queue_id>  the fresh head id where that search stopped, moved on by every
--                                   lease-mode claim past it: a claim without a cursor of its own
--                                   starts there, past the dead entries the drain left in front, and a
--                                   lease-mode claim with one starts there when it is further.
-- Made by create_queue; dropped by drop_queue.
CREATE OR REPLACE FUNCTION outbox._install_claim_hints(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
BEGIN
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_start_q' || p_q.queue_id);
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_front_q' || p_q.queue_id);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue its commit-step triggers:
-- - pgdrain_heads, a statement-level AFTER INSERT trigger running a function made for this queue,
--   outbox.tg_queue__heads_q<queue_id>, whose one statement names the partition column
--   statically, so PL/pgSQL plans it once per session instead of on every statement (a generic
--   function would need a dynamic EXECUTE). It notes the key and id of each new row for the commit
--   step, as outbox._note_written does; the first statement of a transaction, which inserts its
--   hook, inlined (one function call less on the usual transaction), later ones and SERIALIZABLE
--   transactions by calling it.
-- - pgdrain_snapshot, a statement-level BEFORE INSERT trigger that fires only in REPEATABLE READ
--   and SERIALIZABLE transactions (its WHEN costs a READ COMMITTED statement no function call):
--   outbox.tg_queue__snapshot_producer announces the transaction before it takes an id, so that
--   READ COMMITTED commit steps keep the clocks those transactions read (docs/ordering.md).
-- And makes the function of the commit step's late-rows statement (outbox._late_rows_function).
-- Made again by every create_queue, so they always match the registration (nothing else
-- reinstalls the triggers: run create_queue again if one was dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write the notes.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  v_function constant text := 'outbox.' || pg_catalog.quote_ident('tg_queue__heads_q' || p_q.queue_id);
BEGIN
  EXECUTE pg_catalog.format(
    $f$CREATE OR REPLACE FUNCTION %1$s()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
DECLARE
  v_more boolean;
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- Noted in the hook, see outbox._note_written.
    PERFORM outbox._note_written(TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id))
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
    RETURN NULL;
  END IF;
  -- The transaction's first statement notes in its hook; later ones in outbox.commit_notes, the
  -- first of them marking the hook (true comes back only from that update; nothing from later ones).
  INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
  SELECT pg_catalog.pg_current_xact_id(), pg_catalog.array_agg(TG_RELID), pg_catalog.array_agg(n.%3$I::text),
         pg_catalog.array_agg(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.count(*) > 0
  ON CONFLICT (xid) DO UPDATE SET more_notes = true WHERE NOT h.more_notes
  RETURNING h.more_notes INTO v_more;
  IF v_more OR NOT FOUND THEN
    INSERT INTO outbox.commit_notes (table_oid, keys, ids)
    SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id)
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
  END IF;
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', p_q.table_oid::regclass);
  EXECUTE pg_catalog.format(
    $f$CREATE TRIGGER pgdrain_snapshot BEFORE INSERT ON %s FOR EACH STATEMENT
       WHEN (pg_catalog.current_setting('transaction_isolation') <> 'read committed')
       EXECUTE FUNCTION outbox.tg_queue__snapshot_producer(%s, %s)$f$,
    p_q.table_oid::regclass, outbox._snapshot_lock_class(), p_q.queue_id);
  -- The commit step's late-rows statement, made now rather than by a producer's commit, and made
  -- again: its name says the table and column it reads, not the statement, so a migration that
  -- changes the statement (and reinstalls these triggers, as migrations do) replaces it here.
  PERFORM outbox._drop_functions('^_q' || p_q.queue_id || '_late_');
  PERFORM outbox._late_rows_function(p_q);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a queue its NOTIFY machinery as its registration says: the sequence in which drainers say
-- until when they wait (outbox.drainer_waits_q<queue_id>, UNLOGGED: not versioned, so a producer in
-- any snapshot reads the latest value, and moving it leaves no dead tuple and no WAL; after a crash
-- it starts from nothing, which reads as "nobody waits" while the drainers' LISTEN connections
-- reconnect, and reconnecting wakes them), readable by every producer; and for an unpartitioned
-- queue the statement trigger pgdrain_notify (outbox.tg_queue__notify), whose arguments say whether
-- it notifies always or only when a drainer waits. A partitioned queue has no NOTIFY trigger: its
-- commit step notifies (outbox._commit_keys). The arguments name the sequence, never carry its oid:
-- pg_dump writes them as they are, and a restored database gives the sequence another oid.
-- With it, the sequence in which its drainers take turns to claim while rows trickle in
-- (outbox.claim_turn_q<queue_id>, UNLOGGED for the same reasons; see outbox.claim_turn).
-- Made by create_queue and outbox.set_notify; dropped by drop_queue.
CREATE OR REPLACE FUNCTION outbox._install_notify_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  v_sequence constant text := 'outbox.' || pg_catalog.quote_ident('drainer_waits_q' || p_q.queue_id);
  v_rel constant regclass := p_q.table_oid::regclass;
BEGIN
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS %s', v_sequence);
  EXECUTE pg_catalog.format('GRANT SELECT ON SEQUENCE %s TO PUBLIC', v_sequence);
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_turn_q' || p_q.queue_id);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
  IF p_q.partition_column IS NOT NULL THEN
    RETURN;
  END IF;
  IF p_q.notify = 'always' THEN
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, p_q.channel, p_q.queue);
  ELSE
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L, %L, %L)', v_rel, p_q.channel, p_q.queue,
      p_q.queue_id, v_sequence);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Raises the package's argument error: SQLSTATE 22023, message '<function>: <what is wrong>'.
-- Every validation goes through here so that codes and message shapes stay one API.
CREATE OR REPLACE FUNCTION outbox._invalid(p_function text, p_message text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION '%: %', p_function, p_message USING ERRCODE = '22023';
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lateness as a READ COMMITTED commit step sees it, with its commit locks taken (outbox._commit_keys):
-- per key (aligned with p_keys; p_los and p_his our smallest and largest id of each), the largest id
-- of a row of the key that another transaction committed above our smallest, NULL when there is
-- none: our rows must be renumbered past it. Delivered rows count too, so that a key's ids never go
-- down in delivery order. Read from the queue table itself, so that the commit locks need not write
-- a clock (docs/ordering.md): one range of the primary key, from our smallest id to the last id the
-- sequence gave out, whose rows all came after ours; our own rows are known by xmin, and other
-- transactions' uncommitted rows are not visible.
-- The range holds every row any producer wrote since our first one. When it is long (a transaction
-- that stayed open while thousands of other rows were written) every key is taken for late, past
-- the last id given out: renumbering our rows costs less than reading all of theirs, and is always
-- right (a new id is larger than every id given out so far).
--
-- The statement names the queue's table, so it runs in a function made for the queue and its
-- table as registered and named now (outbox._late_rows_function), which keeps its plan for the
-- session. This runs on every producer's commit, so it calls the function directly (one EXECUTE of
-- a call) instead of going through outbox._prepared.
CREATE OR REPLACE FUNCTION outbox._late_rows(p_q outbox.queues, p_keys text[], p_los bigint[], p_his bigint[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_issued constant bigint := pg_catalog.pg_sequence_last_value(p_q.id_sequence);
  v_from bigint := p_los[1];
  v_to bigint := p_his[1];
  v_own bigint := 1;
  v_late bigint[];
BEGIN
  -- One key (the usual transaction): simple expressions only, no query.
  IF pg_catalog.cardinality(p_los) > 1 THEN
    SELECT pg_catalog.min(x.id), pg_catalog.max(x.id), pg_catalog.count(DISTINCT x.id) INTO v_from, v_to, v_own
    FROM unnest(p_los || p_his) AS x(id);
  END IF;
  -- No id given out since ours, or every id from our first to the last given out is one of ours
  -- (one statement of many rows, no other producer between): nobody can have committed a larger
  -- one. (Ids are the primary key: an id of ours is nobody else's.)
  IF v_issued IS NULL OR v_from IS NULL OR v_issued <= v_from
     OR (v_issued <= v_to AND v_own = v_to - v_from + 1) THEN
    RETURN NULL;
  END IF;
  IF v_issued - v_from > 4096 + 2 * (v_to - v_from) THEN
    RETURN pg_catalog.array_fill(v_issued, ARRAY[pg_catalog.cardinality(p_keys)]);
  END IF;
  EXECUTE outbox._late_rows_function(p_q) INTO v_late
    USING p_keys, p_los, pg_catalog.pg_current_xact_id()::text::bigint, v_from, v_issued;
  RETURN v_late;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The function that runs outbox._late_rows' statement for a queue, made for the queue and its table
-- as registered and named now: outbox._q<queue_id>_late_<hash of the table and column>, static
-- SQL, so PL/pgSQL keeps its plan for the session. A renamed table or column finds no function of
-- its name and gets one. Made by create_queue (so that producers' commits do not make it) and
-- otherwise by the first commit that needs it, as outbox._prepared makes its functions (the commit
-- step runs as the schema owner, under a try-lock); when it can not be made now (another session is
-- making it, a read-only transaction, DDL refused), the statement itself runs this once.
-- drop_queue drops it with the queue's other functions.
-- Returns the statement to EXECUTE with $1..$5 = keys, our smallest id of each, our transaction's
-- full id, our smallest id, the last id given out.
CREATE OR REPLACE FUNCTION outbox._late_rows_function(p_q outbox.queues)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_table constant text := p_q.table_oid::regclass::text;
  v_name constant text := '_q' || p_q.queue_id || '_late_' || pg_catalog.left(
    pg_catalog.md5(v_table || '|' || p_q.partition_column), 16);
  v_sql text;
BEGIN
  IF pg_catalog.to_regproc('outbox.' || v_name) IS NOT NULL THEN
    RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
  END IF;
  -- One pass over the range, whatever the number of keys: a key's membership is a lookup in a
  -- jsonb object of our keys, and the answer per key another (no join: this runs under the commit
  -- step's planner settings, and a nested loop over thousands of keys would be quadratic). A
  -- visible row whose xmin is in progress is ours (a savepoint's): its full xid, widened from 32
  -- bits against ours ($3), as outbox._written_here does.
  v_sql := pg_catalog.format(
    'SELECT pg_catalog.array_agg(CASE WHEN (m.j ->> u.k)::bigint > u.lo THEN (m.j ->> u.k)::bigint END ORDER BY u.n)
     FROM (SELECT pg_catalog.jsonb_object_agg(r.k, r.hi) AS j
           FROM (SELECT t.%2$I::text AS k, pg_catalog.max(t.id) AS hi
                 FROM %1$s t
                 WHERE t.id > $4 AND t.id <= $5
                   AND (SELECT pg_catalog.jsonb_object_agg(x.k, true) FROM unnest($1::text[]) AS x(k)) ? t.%2$I::text
                   AND t.xmin::text::bigint <> $3 %% 4294967296
                   AND pg_catalog.pg_xact_status(($3 + ((t.xmin::text::bigint - ($3 %% 4294967296) + 6442450944) %% 4294967296
                                                       - 2147483648))::text::xid8) <> ''in progress''
                 GROUP BY 1) r) m
     CROSS JOIN unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(k, lo, n)',
    v_table, p_q.partition_column);
  IF pg_catalog.current_setting('transaction_read_only') = 'off'
     AND pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name)) THEN
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) RETURNS bigint[] LANGUAGE plpgsql STABLE
         SET search_path = pg_catalog, pg_temp AS %L', v_name, 'BEGIN RETURN (' || v_sql || '); END');
      EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) FROM PUBLIC', v_name);
      EXECUTE pg_catalog.format('COMMENT ON FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) IS %L', v_name,
        'pgdrain: the late-rows statement of queue ' || p_q.queue_id || ' (outbox._late_rows; internal)');
      RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
  END IF;
  RETURN v_sql;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Returns the first of p_ids whose row this transaction does not hold FOR UPDATE, NULL when it holds
-- them all. Ownership comes from the row lock, never from a setting the caller could write.
-- Fast path: xmax is this transaction's own top-level xid (claimed at the top level). Otherwise
-- (claimed in a savepoint: xmax is the subtransaction's xid, or a MultiXact when the transaction
-- also holds a weaker lock on the row or rolled back an update of it) the rows are locked again,
-- FOR UPDATE SKIP LOCKED: a row another transaction holds is skipped; a row this transaction already
-- holds (top level, live or released savepoint) comes back and its xmax stays as it was; a row
-- nobody holds (never locked, its savepoint rolled back, or its holder ended between the two reads)
-- is locked now and gets a new xmax. So a row is ours when it comes back with the xmax it had
-- before. A lock taken here for a row that is not ours ends with the error the caller then raises.
-- Never waits; under REPEATABLE READ a row updated since the snapshot fails with 40001.
CREATE OR REPLACE FUNCTION outbox._locked_here(p_q outbox.queues, p_ids bigint[])
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_table constant regclass := p_q.table_oid::regclass;
  v_all_mine boolean;
  v_before text[];
  v_locked bigint[];
  v_foreign bigint;
BEGIN
  -- The fast path with its plan kept (outbox._prepared; planned on every call it cost 3-4x).
  -- p_ids are distinct (outbox._check_outcomes), so every row is ours when as many rows as ids
  -- have our xid as xmax.
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'SELECT pg_catalog.count(*) = pg_catalog.cardinality($1) FROM %s t WHERE t.id = ANY ($1) AND t.xmax = $2',
    v_table), 'bigint[], xid', 'TABLE(pgdrain_all_mine boolean)')
    INTO v_all_mine USING p_ids, pg_catalog.pg_current_xact_id_if_assigned()::xid;
  IF v_all_mine THEN
    RETURN NULL;
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.xmax::text ORDER BY u.ord)
     FROM pg_catalog.unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord) LEFT JOIN %s t ON t.id = u.id', v_table)
    INTO v_before USING p_ids;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id) FROM (SELECT s.id FROM %s s WHERE s.id = ANY ($1) FOR UPDATE SKIP LOCKED) t',
    v_table)
    INTO v_locked USING p_ids;
  -- A new statement reads the row headers as they are now (xmax is not versioned by the snapshot;
  -- the locking statement itself returns the values it read before locking).
  EXECUTE pg_catalog.format(
    'SELECT u.id FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS u(id, xmax_before, ord)
     LEFT JOIN %s t ON t.id = u.id
     WHERE u.id <> ALL ($3) OR t.xmax IS NULL OR t.xmax::text IS DISTINCT FROM u.xmax_before
     ORDER BY u.ord LIMIT 1', v_table)
    INTO v_foreign USING p_ids, v_before, COALESCE(v_locked, '{}');
  RETURN v_foreign;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The head of one new key of a single-row commit step (outbox.tg_queue__commit), with its floor
-- as the caller decided it (see outbox._make_heads, which makes the heads of many keys): returns
-- whether it made it. false: another session made it meanwhile, committed (ON CONFLICT DO NOTHING)
-- or still being made by an open transaction, a claim applying wake notes or rebuilding heads
-- inside a lock-mode batch; the insert would wait on that transaction's index entry until it ends
-- (issue 29), and gives up after lock_timeout instead. The caller leaves a wake note. One plain
-- INSERT: the single-row path of a producer of new keys ran outbox._make_heads' aggregate for one
-- key (a single-row producer of new keys 0.70 -> 0.75 of the minimal commit step, fsync off).
CREATE OR REPLACE FUNCTION outbox._make_head(p_queue_id integer, p_key text, p_id bigint, p_floor bigint)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1ms'
AS $$
BEGIN
  INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
  VALUES (p_queue_id, p_key, p_id, p_floor)
  ON CONFLICT (queue_id, partition_key) DO NOTHING;
  RETURN FOUND;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END;
$$;
-- +goose StatementEnd

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
-- Notes rows this transaction wrote to a partitioned queue (requeue_poisoned moving rows to the tail
-- of their keys; a producer's INSERT does the same in its generated heads trigger, see
-- outbox._install_heads_trigger) for its commit step. The transaction's first note inserts its row
-- of outbox.commit_hooks, which queues the commit step (outbox.tg_queue__commit) at COMMIT, with the
-- note in it: the usual transaction, one statement, writes no other row. Each later note is one
-- row of outbox.commit_notes, inserted and never updated, so a statement costs the same however
-- many came before it; the first of them marks the hook (more_notes), so that the commit step
-- reads outbox.commit_notes only then. A rolled back savepoint takes its notes with it, like its
-- rows (and its hook, or its mark: a later note inserts it again). It takes no lock a producer could wait for:
-- what protects its uncommitted rows from a claim that finds their partition empty is the commit
-- step's (see outbox.tg_queue__commit and outbox._refresh_heads). Nothing else writes these
-- tables, so a producer can not forge a note.
-- A SERIALIZABLE transaction notes in its hook instead (appended per statement): its commit step
-- must find its notes without an index scan, whose predicate lock on the page other producers'
-- notes go into makes unrelated SERIALIZABLE producers fail as a read/write cycle (see
-- outbox.tg_queue__commit). Its statements then cost in proportion to the notes before them.
-- Arguments: the queue table, and its rows' keys and ids (aligned).
CREATE OR REPLACE FUNCTION outbox._note_written(p_table oid, p_keys text[], p_ids bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_more boolean;
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    IF pg_catalog.cardinality(p_ids) > 0 THEN
      INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
      VALUES (pg_catalog.pg_current_xact_id(), pg_catalog.array_fill(p_table, ARRAY[pg_catalog.cardinality(p_ids)]),
              p_keys, p_ids)
      ON CONFLICT (xid) DO UPDATE
        SET table_oids = h.table_oids || EXCLUDED.table_oids, keys = h.keys || EXCLUDED.keys, ids = h.ids || EXCLUDED.ids;
    END IF;
    RETURN;
  END IF;
  IF COALESCE(pg_catalog.cardinality(p_ids), 0) = 0 THEN
    RETURN;
  END IF;
  -- Marked by the first later note's update (true comes back only from it; nothing from later ones).
  INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
  VALUES (pg_catalog.pg_current_xact_id(), pg_catalog.array_fill(p_table, ARRAY[pg_catalog.cardinality(p_ids)]),
          p_keys, p_ids)
  ON CONFLICT (xid) DO UPDATE SET more_notes = true WHERE NOT h.more_notes
  RETURNING h.more_notes INTO v_more;
  IF v_more OR NOT FOUND THEN
    INSERT INTO outbox.commit_notes (table_oid, keys, ids) VALUES (p_table, p_keys, p_ids);
  END IF;
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
-- Returns the ids changed.
CREATE OR REPLACE FUNCTION outbox._operator_act(p_q outbox.queues, p_action text, p_ids bigint[],
                                                p_attempt_count integer, p_reason text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
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
      WHEN 'poison' THEN 'attempt_count = $3, next_attempt_at = NULL, last_error = $4 || COALESCE('' (last error: '' || t.last_error || '')'', '''')'
      WHEN 'retry' THEN 'next_attempt_at = NULL'
      ELSE 'sent_at = pg_catalog.now(), next_attempt_at = NULL, last_error = $4 || COALESCE('' (last error: '' || t.last_error || '')'', '''')' END)
    INTO v_ids, v_keys
    USING p_ids, p_attempt_count, p_q.max_attempts, v_note, p_q.queue, p_action, p_reason;
  IF v_ids IS NULL THEN
    RETURN '{}';
  END IF;
  RAISE LOG 'pgdrain: % % row(s) % of queue %: %', session_user,
    CASE p_action WHEN 'poison' THEN 'poisoned' WHEN 'dismiss' THEN 'dismissed' ELSE 'retried' END,
    v_ids, p_q.queue, COALESCE(p_reason, '(no reason given)');
  IF p_q.partition_column IS NOT NULL AND p_action <> 'dismiss' THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
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
-- The expression of a queue table's CHECK pgdrain_payload_not_json_null: the payload is a JSON
-- value other than null. PostgreSQL tests every CHECK of a table on every UPDATE of a row, and a
-- row is updated at least twice (its lease or lock, its outcome): jsonb_typeof alone would read the
-- whole payload each time, and a payload stored out of line (TOAST, about 2 kB and up) would be
-- fetched, and decompressed, twice per event. Its stored size comes first: a JSON null is 12
-- bytes, so anything larger is not one and the payload itself is not read (OR stops at its first
-- true operand). Measured in docs/performance.md ("A payload read on every UPDATE").
CREATE OR REPLACE FUNCTION outbox._payload_check()
RETURNS text
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT 'pg_catalog.pg_column_size(payload) > 64 OR pg_catalog.jsonb_typeof(payload) <> ''null''';
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The statement to EXECUTE for p_sql, a statement of queue p_queue_id built with format() whose
-- parameters $1..$n have the types p_args (comma-separated, in order): a call of a function whose
-- body is p_sql as static SQL, so its plan is made once per session instead of on every EXECUTE
-- (planning the claim, record and refresh statements cost as much as running them); p_sql itself
-- when no such function can be had. Both take the same parameters, so the caller's USING list
-- serves either. p_returns is the function's result: 'void', or 'TABLE(...)' whose columns the
-- statement's columns match exactly.
--
-- The function forces a generic plan: left to choose, the plan cache kept planning some of these
-- statements again on every call (a claim's read-back: 465 of 716 calls planned, about 50 µs
-- each), because a generic plan of `= ANY ($1)` looks dearer than a custom one for a short array.
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
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  -- md5 and to_regproc (a name, no argument types to parse): this runs before every statement.
  -- 'generic|': a function made before they forced generic plans is not reused.
  v_name constant text := '_q' || p_queue_id || '_' || pg_catalog.left(
    pg_catalog.md5('generic|' || p_args || '|' || p_returns || '|' || p_sql), 24);
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
        'CREATE FUNCTION outbox.%I(%s) RETURNS %s LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp '
        'SET plan_cache_mode = force_generic_plan AS %L',
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
-- The registry row of a queue, or SQLSTATE 42P01 naming the queue when it is not registered or its
-- table no longer exists (dropped outside drop_queue: every function would otherwise act on a stale
-- oid). One syscache probe, no catalog scan: it runs on every claim. The registration of a dropped
-- table stays until create_queue (which registers the new table and drops the old derived state)
-- or drop_queue.
CREATE OR REPLACE FUNCTION outbox._queue(p_function text, p_queue text)
RETURNS outbox.queues
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_name text := p_queue;
  v_row outbox.queues;
BEGIN
  -- Registered names are canonical: a name found as given needs no parsing (the usual call).
  SELECT * INTO v_row FROM outbox.queues q WHERE q.queue = p_queue;
  IF NOT FOUND THEN
    v_name := outbox._queue_name(p_function, p_queue);
    SELECT * INTO v_row FROM outbox.queues q WHERE q.queue = v_name;
  END IF;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', p_function, v_name
      USING ERRCODE = '42P01';
  END IF;
  -- pg_table_is_visible is NULL exactly when no relation has this oid (a RELOID syscache probe).
  IF pg_catalog.pg_table_is_visible(v_row.table_oid) IS NULL THEN
    RAISE EXCEPTION '%: the table of queue % no longer exists (dropped outside outbox.drop_queue): '
                    'call outbox.create_queue to register it again, or outbox.drop_queue', p_function, v_name
      USING ERRCODE = '42P01';
  END IF;
  RETURN v_row;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Classifies every index of a queue table that covers pending rows (predicate sent_at IS NULL):
-- 'partition' = (<partition column>, id), 'claim' = (attempt_count, id), anything else 'decoy'.
-- check_indexes and create_queue both read this, so they never disagree.
CREATE OR REPLACE FUNCTION outbox._queue_indexes(p_table regclass, p_partition_column text)
RETURNS TABLE(index_name text, role text, definition text, valid boolean)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT c.relname::text,
         CASE
           WHEN cols = ARRAY[p_partition_column, 'id'] THEN 'partition'
           WHEN cols = ARRAY['attempt_count', 'id'] THEN 'claim'
           ELSE 'decoy'
         END,
         pg_catalog.pg_get_indexdef(i.indexrelid),
         i.indisvalid AND i.indisready
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
  CROSS JOIN LATERAL (
    SELECT pg_catalog.array_agg(
             CASE WHEN k.attnum = 0 THEN '(expression)' ELSE a.attname::text END ORDER BY k.ord) AS cols
    FROM pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
    LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
  ) kc
  WHERE i.indrelid = p_table
    AND i.indpred IS NOT NULL
    AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) ~ '\msent_at IS NULL\M'
    AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) !~ '\mOR\M';
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Canonical 'schema.table' for a queue argument. Only plain names are accepted (letters, digits,
-- underscores; folded to lower case like unquoted SQL); an unqualified name means schema public.
CREATE OR REPLACE FUNCTION outbox._queue_name(p_function text, p_queue text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_parts text[];
BEGIN
  IF p_queue IS NULL THEN
    PERFORM outbox._invalid(p_function, 'queue must not be NULL');
  END IF;
  IF p_queue !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$' THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'queue must be a plain name "schema.table" (letters, digits, _), got %L', p_queue));
  END IF;
  v_parts := pg_catalog.string_to_array(pg_catalog.lower(p_queue), '.');
  IF pg_catalog.array_length(v_parts, 1) = 1 THEN
    v_parts := ARRAY['public', v_parts[1]];
  END IF;
  RETURN v_parts[1] || '.' || v_parts[2];
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
-- Records outcomes for rows, the common core of apply_result(s) (p_tokens given: only rows whose
-- lease_token still matches) and settle_locked (p_tokens NULL: the caller checked it holds the
-- row locks). A row that does not qualify is not touched at all. Every outcome clears lease and
-- token together. 'transient' adds an attempt with backoff; on a partitioned queue it is capped
-- at max_attempts - 1 so a partition head is never poisoned by a transient failure. 'permanent'
-- poisons (attempt_count = max_attempts) unless the queue's policy is 'retry'.
-- A backoff is counted from the clock when the outcome is recorded, not from now() (the
-- transaction start): in lock mode the claiming transaction has been open for the whole delivery,
-- and a backoff counted from its start could be over before it is written. sent_at is a record,
-- not a deadline: it stays now(), the time of the transaction that made the row sent. A sent row's
-- last_error is cleared (its attempt_count still says how many attempts failed before): a delivered
-- row showing an old error read as a failure (issue 32).
-- p_retry_at (NULL, or aligned with p_ids; NULL elements = backoff) sets a transient row's next
-- attempt to a time the caller chose (a peer's Retry-After), never earlier than the clock.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[], p_retry_at timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
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
     upd AS (
       -- The attempts a failure leaves are computed from the row being updated, not read in a join
       -- before it: one index probe per row instead of two.
       UPDATE %1$s t SET
         sent_at = CASE WHEN i.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = CASE WHEN i.outcome = ''sent'' THEN t.attempt_count ELSE %3$s END,
         next_attempt_at = CASE
           WHEN i.outcome = ''sent'' THEN t.next_attempt_at
           WHEN %3$s >= $6 THEN NULL
           WHEN i.retry_at IS NOT NULL THEN GREATEST(i.retry_at, $10)
           ELSE $10 + outbox._backoff(%3$s, $8, $9) END,
         last_error = CASE WHEN i.outcome = ''sent'' THEN NULL ELSE i.err END,
         leased_until = NULL,
         lease_token = NULL
       FROM input i
       WHERE t.id = i.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = i.token)
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END,
    -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts while it was
    -- leased stays poisoned.
    '(CASE WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
           ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END)'),
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
-- partition holds its head FOR KEY SHARE until it commits (outbox.tg_queue__commit), so its
-- rows never lose their head; one that finds the head locked by us leaves a wake note, applied by
-- a later claim. When the head is busy an empty head (head_id NULL) is parked for a second and
-- looked at again by a later claim.
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
    'SELECT k.key, n.id, n.attempt_count, fl.floor_id, fl.has_head,
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
  v_locked text[];
  v_busy text[];
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  IF p_keys IS NULL OR pg_catalog.cardinality(p_keys) = 0 THEN
    RETURN;
  END IF;
  -- Point heads at their next row; partitions that are empty or stepped over poisoned rows are
  -- only collected here, so the common uncontended case writes each of them once, below.
  -- Heads that exist are updated in place (an upsert locks each row before it updates it); those
  -- that do not, or were deleted meanwhile, are made.
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH next AS (%s),
     moved AS (
       UPDATE outbox.partition_heads h
       SET head_id = next.id, attempt_count = next.attempt_count, parked_until = next.parked,
           floor_id = CASE WHEN $5 AND h.floor_id >= next.floor_id THEN GREATEST(h.floor_id, next.id)
                           ELSE h.floor_id END
       FROM next
       WHERE next.id IS NOT NULL AND NOT next.tidy AND next.has_head
         AND h.queue_id = $3 AND h.partition_key = next.key
       RETURNING h.partition_key),
     made AS (
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
       SELECT $3, next.key, next.id, next.attempt_count, next.parked, CASE WHEN $5 THEN next.id ELSE 0 END
       FROM next WHERE next.id IS NOT NULL AND NOT next.tidy
         AND next.key NOT IN (SELECT moved.partition_key FROM moved)
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until)
     SELECT pg_catalog.array_agg(next.key ORDER BY next.key) FROM next WHERE next.tidy', v_next),
    'text[], integer, integer, timestamptz, boolean', 'TABLE(pgdrain_tidy text[])')
    INTO v_tidy USING p_keys, p_q.max_attempts, p_q.queue_id, v_now, v_read_committed;
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
-- Gives a leased row back untouched, the common core of release (p_token: only while the lease is
-- the caller's) and release_lease (p_token NULL: an operator ends whatever lease the row has):
-- lease and token cleared together, no attempt counted, the partition's head refreshed and an idle
-- drainer woken. false (nothing changed) when the row was not leased (or not with p_token).
CREATE OR REPLACE FUNCTION outbox._release_row(p_q outbox.queues, p_id bigint, p_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_found boolean;
  v_key text;
BEGIN
  EXECUTE pg_catalog.format(
    'UPDATE %s t SET leased_until = NULL, lease_token = NULL
     WHERE t.id = $1 AND t.lease_token = COALESCE($2, t.lease_token) AND t.sent_at IS NULL
     RETURNING true, %s',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END)
    INTO v_found, v_key USING p_id, p_token;
  IF v_key IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY[v_key]);
  END IF;
  IF v_found THEN
    -- The row is claimable now: wake an idle drainer rather than leave it to the next poll.
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN COALESCE(v_found, false);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives this transaction's pending rows of the late keys new ids from the queue's id sequence, in
-- their order, each larger than the key's clock (the largest committed id of its hash): delivered
-- order (id order) is then commit order (see outbox.tg_queue__commit). A sequence with CACHE > 1
-- hands this session values from its own cache, which may lie below ids other sessions already
-- committed: values not above the clock are drawn and dropped until one is (at most the cache
-- size; the clock never exceeds the sequence's last value, see the caller).
-- Skipped (the key keeps id order) only when the sequence is behind the clock, which means it was
-- set back by hand (setval, ALTER SEQUENCE RESTART): a new id must not collide with a later default.
-- One statement renumbers every late row, so a bulk transaction costs a few statements, not one
-- per row.
-- Arguments: the queue's id sequence (NULL: none), every key the transaction wrote and for each
-- (aligned arrays) its smallest and largest id and, when the key is late, its clock as the caller
-- read it (NULL: not late). Returns every key with its smallest and largest id after renumbering.
CREATE OR REPLACE FUNCTION outbox._renumber_late_rows(p_q outbox.queues, p_sequence regclass, p_keys text[],
                                                      p_los bigint[], p_his bigint[], p_clocks bigint[])
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_last bigint;
  v_ids bigint[];
  v_clock bigint;
  v_first bigint;
BEGIN
  v_last := COALESCE(pg_catalog.pg_sequence_last_value(p_sequence), 0);
  SELECT pg_catalog.max(u.clock) INTO v_clock
  FROM unnest(p_clocks) AS u(clock) WHERE u.clock <= v_last;
  IF p_sequence IS NOT NULL AND v_clock IS NOT NULL THEN
    -- This transaction's rows of every late key, in id order: one index range per key (LATERAL,
    -- kept as such by OFFSET 0, whatever the statistics of a table just filled say). Rows of the top transaction are known
    -- by their xmin; only others (a savepoint's, another producer's) need outbox._written_here.
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(x.id ORDER BY x.id)
       FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(k, lo, hi, clock)
       CROSS JOIN LATERAL (
         SELECT t.id FROM %s t
         WHERE t.%I = u.k::%s AND t.id BETWEEN u.lo AND u.hi AND t.sent_at IS NULL
           AND (t.xmin = $6 OR outbox._written_here(t.xmin))
         OFFSET 0) x
       WHERE u.clock <= $5',
      p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type)
      INTO v_ids USING p_keys, p_los, p_his, p_clocks, v_last,
        (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
  IF v_ids IS NULL THEN
    RETURN QUERY SELECT * FROM unnest(p_keys, p_los, p_his);
    RETURN;
  END IF;

  v_first := pg_catalog.nextval(p_sequence);
  WHILE v_first <= v_clock LOOP
    v_first := pg_catalog.nextval(p_sequence);
  END LOOP;
  -- New ids drawn in the rows' order (the CTE is not inlined, nextval being volatile, and yields
  -- in ordinality order), each above every late key's clock.
  RETURN QUERY EXECUTE pg_catalog.format(
    'WITH fresh AS (
       SELECT o.id AS old_id, CASE WHEN o.n = 1 THEN $2 ELSE pg_catalog.nextval($3) END AS new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(id, n)
       ORDER BY o.n),
     moved AS (
       UPDATE %1$s t SET id = f.new_id FROM fresh f WHERE t.id = f.old_id
       RETURNING t.%2$I::text AS k, t.id),
     -- Every key with its range: that of its moved rows if any, else the one it came with.
     spans AS (
       SELECT m.k, m.id AS lo, m.id AS hi, true AS moved FROM moved m
       UNION ALL
       SELECT u.k, u.lo, u.hi, false FROM unnest($4::text[], $5::bigint[], $6::bigint[]) AS u(k, lo, hi))
     SELECT b.k, COALESCE(pg_catalog.min(b.lo) FILTER (WHERE b.moved), pg_catalog.min(b.lo)),
            COALESCE(pg_catalog.max(b.hi) FILTER (WHERE b.moved), pg_catalog.max(b.hi))
     FROM spans b GROUP BY b.k',
    p_q.table_oid::regclass, p_q.partition_column)
    USING v_ids, v_first, p_sequence, p_keys, p_los, p_his;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables, or recomputes them (_rebuild_heads): every partition with
-- pending rows gets its head again, searched from floor 0.
-- Heads producers made since then are kept (upsert). Runs once per queue: the first claim takes
-- the queue's rebuild lock, looks again, and rebuilds; concurrent claims wait for it.
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
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The first key of the advisory lock by which REPEATABLE READ and SERIALIZABLE producers of a queue
-- announce themselves (outbox.tg_queue__snapshot_producer; the second key is the queue_id). An
-- application that takes advisory locks with two integer keys should not use this first key.
CREATE OR REPLACE FUNCTION outbox._snapshot_lock_class()
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN 1885823231;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether a REPEATABLE READ or SERIALIZABLE transaction may be writing rows of the queue (it holds
-- the shared lock of outbox.tg_queue__snapshot_producer): a READ COMMITTED commit step then raises
-- its keys' clocks, which such a transaction reads to know it is late. Otherwise it only locks them:
-- a clock written on every commit piles up a version per commit of its key while any session holds
-- back the xmin horizon, and every later commit of the key walks them (issue 29).
-- A try of the exclusive lock, let go at once: another READ COMMITTED commit step trying at the same
-- instant makes it answer true, which only costs a clock write.
-- Why no such transaction can miss a lock-only commit: docs/ordering.md.
CREATE OR REPLACE FUNCTION outbox._snapshot_producers_open(p_queue_id integer)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_class constant integer := outbox._snapshot_lock_class();
BEGIN
  IF pg_catalog.pg_try_advisory_lock(v_class, p_queue_id) THEN
    PERFORM pg_catalog.pg_advisory_unlock(v_class, p_queue_id);
    RETURN false;
  END IF;
  RETURN true;
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
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT w.full_xid >= m.top AND pg_catalog.pg_xact_status(w.full_xid::text::xid8) = 'in progress'
  FROM (SELECT pg_catalog.pg_current_xact_id()::text::bigint AS top) m
  CROSS JOIN LATERAL (
    SELECT m.top + ((p_xmin::text::bigint - (m.top % 4294967296) + 6442450944) % 4294967296 - 2147483648)
           AS full_xid) w;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records 'sent', 'transient' or 'permanent' for one leased row, only while lease_token still
-- matches. false = the lease is no longer ours (expired and re-claimed, released, or already
-- recorded): then nothing in the row changed. retry_at, with 'transient' only, is when the next
-- attempt may start (a peer's Retry-After) instead of the queue's backoff.
CREATE OR REPLACE FUNCTION outbox.apply_result(queue text, id bigint, lease_token uuid, outcome text,
                                               error text DEFAULT NULL, retry_at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'apply_result';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF apply_result.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF apply_result.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  PERFORM outbox._check_outcomes(fn, ARRAY[apply_result.id], ARRAY[outcome], ARRAY[error]);
  PERFORM outbox._check_retry_at(fn, ARRAY[apply_result.id], ARRAY[outcome], ARRAY[retry_at]);
  PERFORM outbox._check_delay(fn, 'retry_at', v_q, ARRAY[retry_at], true);
  RETURN pg_catalog.cardinality(outbox._record(v_q, ARRAY[apply_result.id], ARRAY[apply_result.lease_token],
                                               ARRAY[outcome], ARRAY[error], ARRAY[retry_at])) = 1;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- apply_result for a whole batch in one round trip: one row (id, applied) per input id, in input
-- order. Rows whose token no longer matches are reported applied = false and left unchanged.
CREATE OR REPLACE FUNCTION outbox.apply_results(queue text, ids bigint[], lease_tokens uuid[], outcomes text[],
                                                errors text[] DEFAULT NULL, retry_at timestamptz[] DEFAULT NULL)
RETURNS TABLE(id bigint, applied boolean)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'apply_results';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_done bigint[];
BEGIN
  PERFORM outbox._check_outcomes(fn, ids, outcomes, errors);
  PERFORM outbox._check_retry_at(fn, ids, outcomes, retry_at);
  PERFORM outbox._check_delay(fn, 'retry_at', v_q, retry_at, true);
  PERFORM outbox._check_one_dimension(fn, 'lease_tokens', pg_catalog.array_ndims(lease_tokens));
  IF lease_tokens IS NULL OR pg_catalog.cardinality(lease_tokens) <> pg_catalog.cardinality(ids) THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'lease_tokens must have as many elements as ids (%s), got %s', pg_catalog.cardinality(ids),
      COALESCE(pg_catalog.cardinality(lease_tokens)::text, 'NULL')));
  END IF;
  IF pg_catalog.array_position(lease_tokens, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'lease_tokens must not contain NULL');
  END IF;
  IF pg_catalog.cardinality(ids) = 0 THEN
    RETURN;
  END IF;
  v_done := outbox._record(v_q, ids, lease_tokens, outcomes,
                           COALESCE(errors, pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ids)])),
                           retry_at);
  -- IN a subquery: a hashed subplan, linear in the ids (= ANY compared every id with every recorded
  -- one: 0.4 ms per call of 256 results).
  RETURN QUERY SELECT u.id, u.id IN (SELECT d FROM pg_catalog.unnest(v_done) AS d)
               FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Empty when the queue's indexes over pending rows are exactly the required ones. Otherwise one row
-- per problem: 'missing' (a required index), 'decoy' (any other index over sent_at IS NULL: the
-- plan the planner picks when statistics are stale and the queue is deep), 'invalid' (a failed
-- concurrent build).
CREATE OR REPLACE FUNCTION outbox.check_indexes(queue text)
RETURNS TABLE(problem text, index_name text, detail text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('check_indexes', queue);
  v_table regclass := v_q.table_oid::regclass;
BEGIN
  RETURN QUERY
  SELECT 'missing', NULL::text, pg_catalog.format('CREATE INDEX ON %s (%s) WHERE sent_at IS NULL', v_table, r.cols)
  -- quote_ident, not format('%I'): an unpartitioned queue has no partition column (NULL).
  FROM (VALUES ('partition', pg_catalog.quote_ident(v_q.partition_column) || ', id'),
               ('claim', 'attempt_count, id')) AS r(role, cols)
  WHERE (r.role = 'claim' OR v_q.partition_column IS NOT NULL)
    AND NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_table, v_q.partition_column) x
                    WHERE x.role = r.role AND x.valid)
  UNION ALL
  SELECT 'decoy', x.index_name, x.definition
  FROM outbox._queue_indexes(v_table, v_q.partition_column) x
  WHERE x.role = 'decoy' OR (x.role = 'partition' AND v_q.partition_column IS NULL)
  UNION ALL
  SELECT 'invalid', x.index_name, x.definition
  FROM outbox._queue_indexes(v_table, v_q.partition_column) x
  WHERE NOT x.valid;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lease mode: leases up to batch_size deliverable rows for `lease`, each with its own fresh
-- lease_token, in one short transaction (outbox._claim_batch). One row per partition: the seed's
-- claim; claim_runs takes a partition's next rows together.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_batch(queue text, batch_size integer DEFAULT 32, lease interval DEFAULT '30 seconds')
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_batch('claim_batch', queue, batch_size, lease, 1);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lock mode (seed 001's claim transaction): the same deliverable rows as claim_batch, locked
-- FOR UPDATE SKIP LOCKED by the caller's open transaction until it ends (outbox._claim_locked).
-- One row per partition; claim_locked_runs takes a partition's next rows together.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_locked(queue text, batch_size integer DEFAULT 32)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_locked('claim_locked', queue, batch_size, 1);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- claim_locked for partitions with several rows pending: with each partition's head, the rows that
-- follow it, up to run_length per partition and batch_size in all, locked by the caller's open
-- transaction, in id order (outbox._claim_locked). Settle what was applied: a partition's rows up
-- to its first failure (the rest stay untouched). run_length 1 is claim_locked.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_locked_runs(queue text, batch_size integer DEFAULT 32, run_length integer DEFAULT 8)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_locked('claim_locked_runs', queue, batch_size, run_length);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- claim_batch for partitions with several rows pending: with each partition's head, the rows that
-- follow it in its partition, up to run_length per partition and batch_size in all, each with its
-- own lease_token, in id order (outbox._claim_batch). Apply a partition's rows in that order and
-- stop at its first failure, giving the rest back (outbox.release) untouched; recording a
-- partition's rows in one apply_results moves its head once. run_length 1 is claim_batch.
-- Unpartitioned queues: claim_batch.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_runs(queue text, batch_size integer DEFAULT 32, lease interval DEFAULT '30 seconds',
                                             run_length integer DEFAULT 8)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_batch('claim_runs', queue, batch_size, lease, run_length);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Paces the claims of a queue's drainers together while rows trickle in (issue 29: three drainers
-- pacing each on its own claimed three times as often as one, each claim finding a third of the
-- rows, and the producers beside them paid for every claim's fixed cost). A drainer whose last
-- claim found rows but fewer than it asked for calls this before its next claim: it returns how
-- long to wait, or 0 when it is this caller's turn, which it takes (claim now). A turn is taken at
-- most once per `pause` per queue, whichever drainer asks; two that ask at the same instant may
-- both get it (a hint, not a lock). A drainer whose claims come back full does not ask.
-- The turn is the time it was last taken (epoch milliseconds, the server's clock) in the queue's
-- UNLOGGED sequence outbox.claim_turn_q<queue_id> (outbox._install_notify_trigger): no dead tuple,
-- no WAL, nothing to wait for; a queue without it (registered before it existed: call
-- outbox.set_notify again) always answers 0.
CREATE OR REPLACE FUNCTION outbox.claim_turn(queue text, pause interval)
RETURNS interval
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues;
  v_turn regclass;
  v_now_ms bigint;
  v_pause_ms bigint;
  v_last bigint;
BEGIN
  IF pause IS NULL OR pause <= interval '0' OR pause > interval '10 seconds' THEN
    PERFORM outbox._invalid('claim_turn', pg_catalog.format(
      'pause must be positive and at most 10 seconds, got %s', COALESCE(pause::text, 'NULL')));
  END IF;
  v_q := outbox._queue('claim_turn', queue);
  v_turn := pg_catalog.to_regclass('outbox.claim_turn_q' || v_q.queue_id);
  IF v_turn IS NULL THEN
    RETURN interval '0';
  END IF;
  v_now_ms := (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint;
  v_pause_ms := GREATEST((EXTRACT(epoch FROM pause) * 1000)::bigint, 1);
  v_last := pg_catalog.pg_sequence_last_value(v_turn);
  -- A turn taken in the future (the server's clock went back) is over.
  IF v_last <= v_now_ms AND v_now_ms < v_last + v_pause_ms THEN
    RETURN (v_last + v_pause_ms - v_now_ms) * interval '1 millisecond';
  END IF;
  PERFORM pg_catalog.setval(v_turn, v_now_ms);
  RETURN interval '0';
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the TRUNCATE
-- trigger and either the NOTIFY trigger (unpartitioned) or the trigger that feeds the commit step
-- (partitioned, whose commit step notifies); then registers the queue. Idempotent: calling it
-- again with new settings updates them; the partition column can not change. An adopted table keeps its rows; missing lease columns are added as
-- NULL = "free". What the table enforces on producers (CHECKs, column privileges) is
-- outbox._guard_queue_table.
-- Registration follows the table: when the registered table was dropped (or dropped and made
-- again) outside drop_queue, the new table is registered under the same queue_id and every piece
-- of state derived from the old one (partition heads, built-mark, clocks) is dropped first; heads
-- are then rebuilt from the new table's rows.
-- A partitioned queue needs the sequence its ids come from (outbox.queues.id_sequence): the commit
-- step renumbers late rows with it.
-- max_delay bounds every caller-chosen next attempt (enqueue's deliver_at, a worker's retry_at, a
-- plain INSERT of next_attempt_at: outbox._check_delay and the table's CHECK made by
-- outbox._guard_next_attempt_at), so nobody can park a key for ever.
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
  channel text DEFAULT NULL,
  max_delay interval DEFAULT '7 days')
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
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
  IF max_delay IS NULL OR max_delay < backoff_max OR max_delay > interval '3650 days' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_delay must be between backoff_max (%s) and 3650 days, got %s',
      backoff_max, COALESCE(max_delay::text, 'NULL')));
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

  -- A larger max_attempts does not make poisoned rows deliverable again: on a partitioned queue they
  -- would come back in front of what followed them in their keys (a 'register' after the
  -- 'unregister' delivered past it). They stay poisoned, at the new limit, until requeue_poisoned
  -- moves them to the tail of their keys. Read through the claim index (attempt_count, id).
  IF NOT v_new_table AND create_queue.max_attempts > v_old.max_attempts THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = $1, next_attempt_at = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $2 AND t.attempt_count < $1', v_rel)
      USING create_queue.max_attempts, v_old.max_attempts;
  END IF;

  -- clock_base: every id the sequence gave out so far counts as committed for per-key commit order
  -- (sessions with a cached sequence may still hand out smaller ones; their rows are then late).
  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base, max_delay)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0), create_queue.max_delay)
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence, max_delay = EXCLUDED.max_delay,
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
  PERFORM outbox._guard_next_attempt_at(v_rel, create_queue.max_delay,
                                        v_new_table OR v_old.max_delay IS DISTINCT FROM create_queue.max_delay, v_created);

  -- The NOTIFY trigger wakes drainers of an unpartitioned queue; a partitioned queue's rows become
  -- claimable at commit, where its commit step notifies (outbox._commit_keys). Both as
  -- outbox.set_notify last said (a registration keeps it).
  PERFORM outbox._install_notify_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    IF v_new_table THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: dismisses poisoned rows for good: never delivered, kept as history (sent_at set, so
-- they count neither as pending nor as poisoned; last_error says who dismissed them and why;
-- purge_sent removes them with the sent rows). Only rows that are still poisoned and not being
-- delivered right now are taken (see outbox._operator_act); returns how many. Logged in
-- outbox.operator_actions (operator_log) and the server log.
CREATE OR REPLACE FUNCTION outbox.dismiss_poisoned(queue text, ids bigint[], reason text)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'dismiss_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF ids IS NULL OR pg_catalog.cardinality(ids) NOT BETWEEN 1 AND 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('ids must have between 1 and 10000 elements, got %s',
                                                  COALESCE(pg_catalog.cardinality(ids)::text, 'NULL')));
  END IF;
  PERFORM outbox._check_one_dimension(fn, 'ids', pg_catalog.array_ndims(ids));
  IF pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  PERFORM outbox._check_reason(fn, reason);
  RETURN pg_catalog.cardinality(outbox._operator_act(v_q, 'dismiss', ids, NULL, reason));
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A drainer of a queue that notifies 'when_waiting' (outbox.set_notify) says it is about to wait up
-- to `wait` for a NOTIFY, so that producers send one. Returns its mark, a number that is 0 when the
-- queue notifies 'always' (nothing to say: wait as usual) and NULL when a producer is between its
-- check and its commit: then look again soon (claim, and call this again), do not wait long. After
-- a mark, claim once more before waiting: rows that committed before the mark sent no NOTIFY. Pass
-- the mark to outbox.drainer_woke when a NOTIFY wakes the drainer.
-- Why nothing is missed: a producer checks for a mark holding the queue's notify gate shared until
-- it commits (outbox._drainer_waits); this takes the gate exclusively without waiting, so it marks
-- only when no producer is between its check and its commit, and each producer either sees the mark
-- (and notifies) or committed before it (and the claim after the mark sees its rows).
-- The gate is held for the call only, whatever transaction it runs in. Drainers exclude each other
-- with a lock of their own (key -5, as outbox.drainer_woke, which clears a mark without the gate):
-- a mark waits up to 100 ms for it, else answers NULL like a held gate.
-- Marks only grow: a later mark replaces an earlier one, even a longer one, so drainer_woke of a
-- drainer never clears another's mark.
CREATE OR REPLACE FUNCTION outbox.drainer_waits(queue text, wait interval)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
  v_mark bigint;
BEGIN
  IF wait IS NULL OR wait <= interval '0' OR wait > interval '1 day' THEN
    RAISE EXCEPTION 'drainer_waits: wait must be positive and at most 1 day, got %', COALESCE(wait::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_waits', queue);
  IF v_q.notify = 'always' THEN
    RETURN 0;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL THEN
    RAISE EXCEPTION 'drainer_waits: queue % has no sequence outbox.drainer_waits_q% (call outbox.set_notify again)',
      v_q.queue, v_q.queue_id USING ERRCODE = '55000';
  END IF;
  -- The gate is taken for this call only (a session lock, released on every way out; a
  -- transaction lock would make producers that must notify wait for the caller's transaction).
  IF NOT pg_catalog.pg_try_advisory_lock(1885823232 + v_q.queue_id, -4) THEN
    RETURN NULL;
  END IF;
  BEGIN
    PERFORM pg_catalog.pg_advisory_lock(1885823232 + v_q.queue_id, -5);
  EXCEPTION WHEN lock_not_available THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RETURN NULL;
  WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RAISE;
  END;
  BEGIN
    v_mark := GREATEST(COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0) + 1,
                       (EXTRACT(epoch FROM pg_catalog.clock_timestamp() + wait) * 1000)::bigint);
    PERFORM pg_catalog.setval(v_sequence, v_mark);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RAISE;
  END;
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
  RETURN v_mark;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A drainer that outbox.drainer_waits marked as waiting was woken by a NOTIFY: producers stop
-- notifying, unless another drainer marked itself since (marks only grow, so its mark is then not
-- this one: every drainer that LISTENs on the channel got the same NOTIFY, so clearing after one is
-- safe only when nobody marked after it). A mark of 0 (a queue that notifies 'always') does nothing.
-- Clearing needs no producer to be out of the way (it is a mark that ran out early, which the
-- protocol already allows: a drainer claims once more after every mark), so it does not take the
-- notify gate: producers that commit back to back hold it shared nearly all the time, and a clear
-- that needed it left every producer notifying, each commit queued on NOTIFY's lock, until the
-- mark ran out (PollFallback + 1 s; issue 29: producers beside one drainer at a quarter of their
-- rate). Drainers exclude each other with a lock of their own (key -5), held for the compare and
-- the setval only; one that waits 100 ms for it (someone else holds that key) lets the mark run out.
CREATE OR REPLACE FUNCTION outbox.drainer_woke(queue text, mark bigint)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
BEGIN
  IF mark IS NULL OR mark < 0 THEN
    RAISE EXCEPTION 'drainer_woke: mark must be a mark outbox.drainer_waits returned (0 or more), got %',
      COALESCE(mark::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_woke', queue);
  IF mark = 0 OR v_q.notify = 'always' THEN
    RETURN;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL THEN
    RETURN;
  END IF;
  BEGIN
    PERFORM pg_catalog.pg_advisory_lock(1885823232 + v_q.queue_id, -5);
  EXCEPTION WHEN lock_not_available THEN
    RETURN;
  END;
  BEGIN
    IF pg_catalog.pg_sequence_last_value(v_sequence) = mark THEN
      PERFORM pg_catalog.setval(v_sequence, 1);
    END IF;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
    RAISE;
  END;
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
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
-- Convenience insert; a plain INSERT into the queue table is equally valid (the triggers do the
-- rest). partition_key is required (and must not be empty or blank) on a partitioned queue and
-- refused on an unpartitioned one. The payload must be a JSON value other than null. deliver_at
-- delays the first attempt, headers (an object of strings) travel to the sink, event_id is the
-- event's stable identity (generated when NULL). Returns the id; outbox.enqueue_event returns the
-- event_id too.
CREATE OR REPLACE FUNCTION outbox.enqueue(queue text, event_type text, payload jsonb, partition_key text DEFAULT NULL,
                                          deliver_at timestamptz DEFAULT NULL, headers jsonb DEFAULT NULL,
                                          event_id uuid DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT e.id FROM outbox._enqueue('enqueue', queue, event_type, payload, partition_key, deliver_at, headers, event_id) e;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- enqueue, returning the event's stable identity with its id: the event_id every sink and peer
-- dedupes on (the id may change at COMMIT on a partitioned queue; the event_id never does).
CREATE OR REPLACE FUNCTION outbox.enqueue_event(queue text, event_type text, payload jsonb,
                                                partition_key text DEFAULT NULL, deliver_at timestamptz DEFAULT NULL,
                                                headers jsonb DEFAULT NULL, event_id uuid DEFAULT NULL)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT e.id, e.event_id
  FROM outbox._enqueue('enqueue_event', queue, event_type, payload, partition_key, deliver_at, headers, event_id) e;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Heartbeat: moves leased_until to clock_timestamp() + lease while lease_token still matches and
-- returns it; NULL (and nothing changed) when the lease is no longer ours. The clock, not now():
-- counted from the start of an older transaction the new lease could already be over.
CREATE OR REPLACE FUNCTION outbox.extend_lease(queue text, id bigint, lease_token uuid, lease interval)
RETURNS timestamptz
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'extend_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_until timestamptz;
  v_key text;
BEGIN
  IF extend_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF extend_lease.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  PERFORM outbox._check_lease(fn, lease);
  EXECUTE pg_catalog.format(
    'UPDATE %s t SET leased_until = pg_catalog.clock_timestamp() + $3
     WHERE t.id = $1 AND t.lease_token = $2 AND t.sent_at IS NULL
     RETURNING t.leased_until, %s',
    v_q.table_oid::regclass,
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END)
    INTO v_until, v_key USING extend_lease.id, extend_lease.lease_token, lease;
  IF v_key IS NOT NULL THEN
    UPDATE outbox.partition_heads h SET parked_until = v_until
    WHERE h.queue_id = v_q.queue_id AND h.partition_key = v_key AND h.head_id = extend_lease.id
      -- Claims no longer park the heads of leased rows (00005); one parked before still follows.
      AND h.parked_until IS NOT NULL;
  END IF;
  RETURN v_until;
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
-- The operators' actions on a queue's rows (poison_row, retry_row, dismiss_poisoned), newest first:
-- at most max_rows (1..1000), below before_action_id when given (the next page). Each with the
-- login role that acted, its reason, the row's id, event_id, key and attempt count at the time.
CREATE OR REPLACE FUNCTION outbox.operator_log(queue text, max_rows integer DEFAULT 50, before_action_id bigint DEFAULT NULL)
RETURNS TABLE(action_id bigint, acted_at timestamptz, action text, id bigint, event_id uuid, partition_key text,
              attempt_count integer, reason text, acted_by text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'operator_log';
  v_name text := outbox._queue_name(fn, queue);
BEGIN
  IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('max_rows must be between 1 and 1000, got %s',
                                                  COALESCE(max_rows::text, 'NULL')));
  END IF;
  -- By name: the log outlives the queue's registration (drop_queue keeps it).
  RETURN QUERY
    SELECT a.action_id, a.acted_at, a.action, a.row_id, a.event_id, a.partition_key, a.attempt_count, a.reason, a.acted_by
    FROM outbox.operator_actions a
    WHERE a.queue = v_name AND (before_action_id IS NULL OR a.action_id < before_action_id)
    ORDER BY a.action_id DESC
    LIMIT max_rows;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: skips a row that will never succeed (a head a peer rejects for ever with a transient
-- error wedges its key): poisons it with a reason, so its key's later rows are delivered past it;
-- requeue_poisoned delivers it later, at the tail of its key. Fenced by what the operator saw: the
-- row must still be pending with that attempt_count (wedged_partitions' head_attempt_count) and
-- not be delivered right now (see outbox._operator_act); otherwise false and nothing changed.
-- Logged in outbox.operator_actions (operator_log) and the server log.
CREATE OR REPLACE FUNCTION outbox.poison_row(queue text, id bigint, attempt_count integer, reason text)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'poison_row';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF poison_row.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF poison_row.attempt_count IS NULL OR poison_row.attempt_count < 0 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'attempt_count must be the row''s attempt count as last seen (0 or more), got %s',
      COALESCE(poison_row.attempt_count::text, 'NULL')));
  END IF;
  PERFORM outbox._check_reason(fn, reason);
  RETURN pg_catalog.cardinality(outbox._operator_act(v_q, 'poison', ARRAY[poison_row.id], poison_row.attempt_count, reason)) = 1;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The poisoned rows of a queue for an operator's page: newest first, at most max_rows (1..1000),
-- below before_id when given (the next page). Read through the claim index (attempt_count at
-- max_attempts among unsent rows), so a page never walks the pending backlog. payload_preview (the
-- payload's first 200 characters) only for a caller whose login role may read the queue table's
-- payload column; NULL otherwise (operators are not granted payloads, docs/security.md).
CREATE OR REPLACE FUNCTION outbox.poisoned_rows(queue text, max_rows integer DEFAULT 50, before_id bigint DEFAULT NULL)
RETURNS TABLE(id bigint, event_id uuid, event_type text, partition_key text, attempt_count integer,
              last_error text, created_at timestamptz, payload_preview text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
  fn constant text := 'poisoned_rows';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_payload boolean;
BEGIN
  IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('max_rows must be between 1 and 1000, got %s',
                                                  COALESCE(max_rows::text, 'NULL')));
  END IF;
  v_payload := pg_catalog.has_column_privilege(session_user, v_q.table_oid, 'payload', 'SELECT');
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id, %s, t.event_type, %s, t.attempt_count, t.last_error, t.created_at,
            CASE WHEN $4 THEN pg_catalog.left(t.payload::text, 200) END
     FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint IS NULL OR t.id < $2)
     ORDER BY t.attempt_count DESC, t.id DESC LIMIT $3',
    outbox._event_id_of(v_q),
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    v_q.table_oid::regclass)
    USING v_q.max_attempts, before_id, max_rows, v_payload;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Retention: deletes at most max_rows rows sent more than older_than ago, oldest ids first, in one
-- short statement (SKIP LOCKED, so it never waits for a drainer). Call it repeatedly until it
-- returns 0; each call is its own small transaction when called outside one.
CREATE OR REPLACE FUNCTION outbox.purge_sent(queue text, older_than interval DEFAULT '7 days', max_rows integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'purge_sent';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
BEGIN
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_rows must be between 1 and 1000000, got %s', COALESCE(max_rows::text, 'NULL')));
  END IF;
  EXECUTE pg_catalog.format(
    'WITH del AS (
       DELETE FROM %1$s t WHERE t.id = ANY (ARRAY(
         SELECT s.id FROM %1$s s WHERE s.sent_at < pg_catalog.now() - $1
         ORDER BY s.id LIMIT $2 FOR UPDATE SKIP LOCKED))
       RETURNING 1)
     SELECT pg_catalog.count(*) FROM del', v_q.table_oid::regclass)
    INTO v_count USING older_than, max_rows;
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A queue's registration as the drainers need it, so that a worker reads it through a function
-- granted to pgdrain_worker instead of needing SELECT on outbox.queues. Errors like every function
-- (42P01) when the queue is not registered.
CREATE OR REPLACE FUNCTION outbox.queue_info(queue text)
RETURNS TABLE(queue_name text, partition_column text, max_attempts integer, backoff_min interval,
              backoff_max interval, permanent_policy text, channel text, max_delay interval)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('queue_info', queue);
BEGIN
  RETURN QUERY SELECT v_q.queue, v_q.partition_column, v_q.max_attempts, v_q.backoff_min, v_q.backoff_max,
                      v_q.permanent_policy, v_q.channel, v_q.max_delay;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a leased row back untouched: lease and token cleared, no attempt counted, claimable at
-- once. false (and nothing changed) when the lease is no longer ours.
CREATE OR REPLACE FUNCTION outbox.release(queue text, id bigint, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'release';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF release.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF release.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  RETURN outbox._release_row(v_q, release.id, release.lease_token);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: ends the lease of a stuck row now (a worker that hangs without dying holds it until
-- leased_until): lease and token cleared together, no attempt counted, claimable at once. The
-- holder's late result is then refused by the token, like any result after a lease ran out.
-- false (nothing changed) when the row is not leased (or is sent).
CREATE OR REPLACE FUNCTION outbox.release_lease(queue text, id bigint)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'release_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF release_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  RETURN outbox._release_row(v_q, release_lease.id, NULL);
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
--                    deliverable row is due;
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
         SELECT t.id, GREATEST(t.next_attempt_at, t.leased_until, $3) AS due FROM %1$s t
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
       WHERE keys.k IS NOT NULL AND NOT n.noted) s
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
-- Operator: gives poisoned rows (all of them, or the given ids) a fresh start: attempt_count 0,
-- due now, last_error kept for the record. Returns how many rows were requeued.
-- On a partitioned queue a requeued row goes to the TAIL of its key, as if committed now: it gets a
-- new id from the queue's sequence and is delivered after every row of its key committed before
-- the requeue, never before a successor that was already delivered (an old "register" must not
-- come back after the "unregister" that followed it without the operator asking for exactly that;
-- see docs/ordering.md). The rows then go through the producers' commit step (outbox._note_written):
-- order against concurrent producers, heads, NOTIFY. Their event is the same; only the position moves.
CREATE OR REPLACE FUNCTION outbox.requeue_poisoned(queue text, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'requeue_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
  v_old bigint[];
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  IF ids IS NOT NULL AND pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  IF v_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL, lease_token = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
      v_q.table_oid::regclass)
      USING v_q.max_attempts, ids;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
      PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
    END IF;
    RETURN v_count;
  END IF;

  IF v_q.id_sequence IS NULL THEN
    RAISE EXCEPTION '%: queue % has no id sequence to move requeued rows to the tail of their keys (call outbox.create_queue again)',
      fn, v_q.queue USING ERRCODE = '55000';
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
    v_q.table_oid::regclass)
    INTO v_old USING v_q.max_attempts, ids;
  IF v_old IS NULL THEN
    RETURN 0;
  END IF;
  -- A REPEATABLE READ or SERIALIZABLE requeue announces itself before it takes ids, as a
  -- producer's insert does (outbox.tg_queue__snapshot_producer).
  IF v_q.partition_column IS NOT NULL AND pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(outbox._snapshot_lock_class(), v_q.queue_id);
  END IF;
  -- New ids in the order of the old ones (generate_series yields in order, nextval runs per row).
  EXECUTE pg_catalog.format(
    'WITH moved AS (
       SELECT o.old_id, n.new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(old_id, i)
       JOIN (SELECT g.i, pg_catalog.nextval($3) AS new_id FROM pg_catalog.generate_series(1, $4) AS g(i)) n
         ON n.i = o.i),
     upd AS (
       UPDATE %1$s t SET id = m.new_id, attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                         lease_token = NULL, event_id = %3$s
       FROM moved m WHERE t.id = m.old_id AND t.sent_at IS NULL AND t.attempt_count >= $2
       RETURNING t.id, t.%2$I::text AS key)
     SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
            COALESCE(pg_catalog.sum(n), 0)
     FROM (SELECT upd.key AS k, pg_catalog.min(upd.id) AS lo, pg_catalog.max(upd.id) AS hi, pg_catalog.count(*) AS n
           FROM upd GROUP BY 1) s',
    v_q.table_oid::regclass, v_q.partition_column, outbox._event_id_of(v_q))
    INTO v_keys, v_mins, v_maxs, v_count USING v_old, v_q.max_attempts, v_q.id_sequence, pg_catalog.cardinality(v_old);
  IF v_keys IS NULL THEN
    RETURN 0;
  END IF;
  -- Each key's first and last moved row: what the commit step needs of them.
  PERFORM outbox._note_written(v_q.table_oid, v_keys || v_keys, v_mins || v_maxs);
  -- The commit step notifies only for heads it creates or wakes; a requeue is an operator asking
  -- for delivery now, so say so whatever the heads were.
  PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: retries a backing-off row now (ends its backoff; no attempt is counted), e.g. once the
-- peer it failed on is fixed. Fenced by what the operator saw: the row must still be pending, backing
-- off, with that attempt_count, and not be delivered right now (see outbox._operator_act);
-- otherwise false and nothing changed. Logged in outbox.operator_actions (operator_log) and the
-- server log; reason is optional.
CREATE OR REPLACE FUNCTION outbox.retry_row(queue text, id bigint, attempt_count integer, reason text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'retry_row';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF retry_row.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF retry_row.attempt_count IS NULL OR retry_row.attempt_count < 0 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'attempt_count must be the row''s attempt count as last seen (0 or more), got %s',
      COALESCE(retry_row.attempt_count::text, 'NULL')));
  END IF;
  IF reason IS NOT NULL THEN
    PERFORM outbox._check_reason(fn, reason);
  END IF;
  RETURN pg_catalog.cardinality(outbox._operator_act(v_q, 'retry', ARRAY[retry_row.id], retry_row.attempt_count, reason)) = 1;
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
SET search_path = pg_catalog, pg_temp
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
-- Lock mode: records outcomes for rows this transaction claimed with claim_locked and still holds.
-- Refuses (SQLSTATE 55000, nothing changed) any id this transaction does not hold: the id must be
-- in claim_locked's list for this transaction and its row lock must be this transaction's, taken at
-- the top level or in a savepoint that is still open or was released (a rolled-back savepoint
-- took its lock, and its part of the list, with it). Returns how many rows were recorded. A
-- settled row leaves the held set, so it is recorded at most once per claim: settling it again is
-- refused like any row not held (else a second 'transient' would count a second attempt).
CREATE OR REPLACE FUNCTION outbox.settle_locked(queue text, ids bigint[], outcomes text[], errors text[] DEFAULT NULL,
                                                retry_at timestamptz[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'settle_locked';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_held bigint[];
  v_foreign bigint;
  v_count bigint;
BEGIN
  PERFORM outbox._check_outcomes(fn, ids, outcomes, errors);
  PERFORM outbox._check_retry_at(fn, ids, outcomes, retry_at);
  PERFORM outbox._check_delay(fn, 'retry_at', v_q, retry_at, true);
  IF pg_catalog.cardinality(ids) = 0 THEN
    RETURN 0;
  END IF;
  v_held := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting('pgdrain.held_' || v_q.queue_id, true), ''), ',')::bigint[];
  -- NOT IN a subquery: a hashed subplan, linear in the ids (<> ALL compared every id with every held
  -- one).
  SELECT x INTO v_foreign FROM pg_catalog.unnest(ids) x
  WHERE x NOT IN (SELECT h FROM pg_catalog.unnest(v_held) AS h) LIMIT 1;
  IF NOT FOUND THEN
    -- The setting is only a list any session could SET LOCAL: the row lock itself must be ours
    -- too (outbox._locked_here: claim_locked's FOR UPDATE, in this transaction or one of its
    -- live savepoints).
    v_foreign := outbox._locked_here(v_q, ids);
  END IF;
  IF v_foreign IS NOT NULL THEN
    RAISE EXCEPTION '%: row % of % is not held by this transaction (claim it with claim_locked in the same transaction)',
      fn, v_foreign, v_q.queue USING ERRCODE = '55000';
  END IF;
  v_count := pg_catalog.cardinality(outbox._record(v_q, ids, NULL, outcomes,
    COALESCE(errors, pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ids)])), retry_at));
  PERFORM pg_catalog.set_config('pgdrain.held_' || v_q.queue_id,
    COALESCE((SELECT pg_catalog.string_agg(h::text, ',') FROM pg_catalog.unnest(v_held) h
              WHERE h NOT IN (SELECT i FROM pg_catalog.unnest(ids) AS i)), ''),
    true);
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- One row of gauges for metrics. Exact counts from one pass over the pending rows through the
-- (attempt_count, id) partial index: cost follows the pending backlog, never the sent history.
-- pending = unsent and not poisoned; ready = pending, due and not leased; leased = lease live;
-- backing_off = pending with next_attempt_at in the future; poisoned = attempt_count >= max.
CREATE OR REPLACE FUNCTION outbox.stats(queue text)
RETURNS TABLE(pending bigint, ready bigint, leased bigint, backing_off bigint, poisoned bigint,
              oldest_pending_at timestamptz, oldest_pending_age interval)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
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
            pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1),
            pg_catalog.now() - pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1)
     FROM %s t WHERE t.sent_at IS NULL AND t.attempt_count >= 0', v_q.table_oid::regclass)
    USING v_q.max_attempts;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), queued by the first note of a transaction (see
-- outbox._note_written and the generated heads triggers), fires at COMMIT. It takes every note of
-- the transaction (the first statement's are in the hook, which it deletes anyway: a transaction
-- of one statement reads and deletes nothing else) and hands each partitioned queue's keys and ids to
-- outbox._commit_keys in queue_id order: the commit locks of all transactions are taken in one
-- global order, and committing transactions never deadlock. The usual transaction, one row written
-- in one statement under READ COMMITTED, is done here in scalar statements (see below).
-- Immediate constraints (SET CONSTRAINTS ALL IMMEDIATE, which ORMs and migration tools issue) fire
-- it inside the producing statement that queued it (trigger depth above 1): it then defers itself
-- to COMMIT (sets its own constraint DEFERRED and queues itself again) and takes no lock. Run there,
-- it would hold its commit locks until the transaction ends, and two producers writing two keys in
-- opposite order would deadlock (issue 29). SET CONSTRAINTS ... IMMEDIATE after rows were written
-- still runs it at once, at depth 1 (its locks are then held until the transaction ends); rows
-- written after that queue it again, for COMMIT.
-- Few statements, each simple, by index (these tables churn, and their statistics say they are
-- empty): every one is an executor start on the producer's write path, and so is every function
-- called and every planner setting it pins (a function of its own for the one-row path, with its
-- settings, cost about 30 µs of a 110 µs commit step).
CREATE OR REPLACE FUNCTION outbox.tg_queue__commit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
  v_notes outbox.commit_notes[];
  v_q outbox.queues;
  v_merged record;
  v_notified boolean;
  v_hook tid;
  v_oids oid[];
  v_keys text[];
  v_ids bigint[];
  v_requeued outbox.commit_hooks;
  v_more boolean;
  v_hooked record;
  v_key text;
  v_id bigint;
  v_head bigint;
  v_floor bigint;
  v_write_clock boolean;
  v_exists boolean;
  v_sure boolean;
BEGIN
  IF pg_catalog.pg_trigger_depth() > 1 THEN
    SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
    -- Found by the arbiter and moved by ctid, as below: no predicate lock in SERIALIZABLE.
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (NEW.xid)
    ON CONFLICT (xid) DO UPDATE SET xid = EXCLUDED.xid
    RETURNING h.ctid INTO v_hook;
    DELETE FROM outbox.commit_hooks h WHERE h.ctid = v_hook RETURNING h.* INTO v_requeued;
    INSERT INTO outbox.commit_hooks VALUES (v_requeued.*);
    RETURN NULL;
  END IF;
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- The notes are in the hook (outbox._note_written), which is found by the arbiter of its
    -- primary key and deleted by ctid: neither takes a predicate lock (an index scan would lock
    -- the page the next producer's hook goes into, a read/write dependency on it; three
    -- overlapping producers of unrelated keys then failed with 40001). No note rows to read.
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (NEW.xid)
    ON CONFLICT (xid) DO UPDATE SET xid = EXCLUDED.xid
    RETURNING h.ctid, h.table_oids, h.keys, h.ids INTO v_hook, v_oids, v_keys, v_ids;
    DELETE FROM outbox.commit_hooks h WHERE h.ctid = v_hook;
  ELSE
    -- The first statement's notes are in the hook (as a TRUNCATE in the transaction left them),
    -- later statements' in outbox.commit_notes (outbox._note_written).
    -- With the queue of the first statement's table, in the same statement. The transaction may
    -- have dropped a table it wrote: nothing of it is left to order.
    DELETE FROM outbox.commit_hooks h WHERE h.xid = NEW.xid
    RETURNING h.table_oids, h.keys, h.ids, h.more_notes,
              (SELECT q FROM outbox.queues q
               WHERE q.table_oid = h.table_oids[1] AND q.partition_column IS NOT NULL
                 AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL) AS q
      INTO v_hooked;
    v_oids := v_hooked.table_oids;
    v_keys := v_hooked.keys;
    v_ids := v_hooked.ids;
    v_more := v_hooked.more_notes;
    -- (No notes in the hook: a heads trigger made before 00025 notes every statement in
    -- outbox.commit_notes.)
    IF v_more OR v_ids IS NULL THEN
      -- The whole row (RETURNING n), not its columns: an array of the CTE's own row type would be
      -- converted to outbox.commit_notes[] through text, element by element (about 3 µs a commit).
      WITH taken AS (DELETE FROM outbox.commit_notes n WHERE n.xid = NEW.xid RETURNING n)
      SELECT pg_catalog.array_agg(t.n) INTO v_notes FROM taken t;
    ELSE
      -- One statement (the usual transaction): its keys and ids as noted.
      v_q := v_hooked.q;
      IF v_q.queue_id IS NULL OR pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN NULL;
      END IF;
      IF pg_catalog.cardinality(v_ids) > 1 OR pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, false);
        RETURN NULL;
      END IF;
      -- One row, READ COMMITTED: the steps of outbox._commit_keys in scalar statements.
      v_key := v_keys[1];
      v_id := v_ids[1];
      -- The commit lock of the key's hash, without writing the clock unless a REPEATABLE READ or
      -- SERIALIZABLE producer of the queue may be open (outbox._snapshot_producers_open, inline).
      v_write_clock := NOT pg_catalog.pg_try_advisory_lock(outbox._snapshot_lock_class(), v_q.queue_id);
      IF NOT v_write_clock THEN
        v_write_clock := NOT pg_catalog.pg_advisory_unlock(outbox._snapshot_lock_class(), v_q.queue_id);
      END IF;
      INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
      VALUES (v_q.queue_id, pg_catalog.hashtext(v_key) & 65535,
              GREATEST(v_q.clock_base, LEAST(v_id, pg_catalog.pg_sequence_last_value(v_q.id_sequence))),
              v_q.clock_base)
      ON CONFLICT (queue_id, slot) DO UPDATE
        SET previous_max = c.committed_max,
            committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
        WHERE v_write_clock;
      -- A new statement: its snapshot sees every commit that released the lock. Late when another
      -- transaction committed a row of the key with a larger id (outbox._late_rows). Asked before
      -- the head is read: a claim may raise the floor of a head we hold (docs/ordering.md, "One
      -- floor raise needs no lock") only by moving it on to a row that our question, coming first,
      -- sees pending. No id given out since ours (read under the lock): nobody committed a larger
      -- one, no question.
      IF pg_catalog.pg_sequence_last_value(v_q.id_sequence) > v_id
         AND (outbox._late_rows(v_q, v_keys, v_ids, v_ids))[1] IS NOT NULL THEN
        v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, true);
        RETURN NULL;
      END IF;
      -- The head, held until we commit (none when a claim holds it).
      SELECT x.head_id, x.floor_id INTO v_head, v_floor
      FROM outbox.partition_heads x
      WHERE x.queue_id = v_q.queue_id AND x.partition_key = v_key
      FOR KEY SHARE SKIP LOCKED;
      IF FOUND THEN
        -- A head with rows below a floor that is not above us (the usual case for a key with a
        -- backlog): done. Else a head to wake or a floor to lower.
        IF v_head IS NULL OR v_floor > v_id THEN
          v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, true);
        END IF;
        RETURN NULL;
      END IF;
      -- No head we could hold. One that exists (a claim holds it) is left to outbox._commit_keys,
      -- also one a claim's open transaction deleted: the probe above skips it (locked), this
      -- snapshot still sees it, and an insert of the key would wait on that transaction's index
      -- entry (issue 29: a lock-mode batch that delivered a key's last row held its producers at
      -- COMMIT). A new key's floor is its id only while the queue's heads are complete and no wake
      -- note waits for the key (the reasons are on outbox._make_heads). One statement for the three
      -- questions.
      SELECT EXISTS (SELECT 1 FROM outbox.partition_heads x WHERE x.queue_id = v_q.queue_id AND x.partition_key = v_key),
             EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id)
             AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                             WHERE w.queue_id = v_q.queue_id AND w.partition_key = v_key)
        INTO v_exists, v_sure;
      IF v_exists THEN
        v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, true);
        RETURN NULL;
      END IF;
      -- A new key (the other usual case): its head, made as outbox._commit_keys makes it.
      IF NOT outbox._make_head(v_q.queue_id, v_key, v_id, CASE WHEN v_sure THEN v_id ELSE 0 END) THEN
        -- Made meanwhile by another session, maybe a claim's open transaction: a wake note.
        INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id) VALUES (v_q.queue_id, v_key, v_id);
      END IF;
      IF outbox._drainer_waits(v_q) THEN
        PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
      END IF;
      RETURN NULL;
    END IF;
  END IF;
  -- Many statements, maybe several queues (or a SERIALIZABLE transaction's hook): each queue's
  -- keys and ids, merged.
  FOR v_merged IN
    SELECT q, m.keys, m.ids
    FROM (SELECT u.table_oid, pg_catalog.array_agg(u.k) AS keys, pg_catalog.array_agg(u.id) AS ids
          FROM (SELECT n.table_oid, x.k, x.id
                FROM pg_catalog.unnest(v_notes) n CROSS JOIN LATERAL unnest(n.keys, n.ids) AS x(k, id)
                UNION ALL
                SELECT * FROM unnest(v_oids, v_keys, v_ids)) AS u(table_oid, k, id)
          GROUP BY u.table_oid) m
    JOIN outbox.queues q ON q.table_oid = m.table_oid
    WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
    ORDER BY q.queue_id
  LOOP
    v_notified := outbox._commit_keys(v_merged.q, v_merged.keys, v_merged.ids, v_merged.ids, false);
  END LOOP;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of an unpartitioned queue: one NOTIFY per statement
-- (PostgreSQL folds identical notifications of one transaction into one), never one per row. A
-- partitioned queue has none: its rows become claimable at commit, and its commit step
-- (outbox._commit_keys) notifies only when it made or woke a partition head; rows behind an
-- existing head are claimed when the drainer that finishes the head claims again. NOTIFY takes a
-- cluster-wide lock at commit, held through the commit's WAL flush, so concurrent producers that
-- notify commit one at a time: a queue that notifies 'when_waiting' (outbox.set_notify) skips it
-- unless a drainer waits for one (the check of outbox._drainer_waits, inlined: no lookup, its
-- arguments name the queue and sequence).
-- Arguments: channel, queue name (the payload); for 'when_waiting' also the queue_id and the name
-- of its drainer_waits_q<queue_id> sequence (a name, so a restored database finds its own; a
-- trigger made before 00025 gives an oid, which reads the same way).
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- Not in a transaction that set pgdrain.notify to 'off' (two-phase commit: see outbox._drainer_waits).
  IF pg_catalog.current_setting('pgdrain.notify', true) = 'off' THEN
    RETURN NULL;
  END IF;
  IF TG_NARGS > 2 THEN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + TG_ARGV[2]::integer, -4);
    IF COALESCE(pg_catalog.pg_sequence_last_value(TG_ARGV[3]::regclass), 0)
       <= (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint THEN
      RETURN NULL;
    END IF;
  END IF;
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- pgdrain_snapshot (outbox._install_heads_trigger): a REPEATABLE READ or SERIALIZABLE transaction
-- about to write rows of a partitioned queue announces itself before it
-- takes an id, with a shared transaction-level advisory lock held until it ends. Such a transaction
-- reads the key clocks in its snapshot at COMMIT and can not see later commits in the queue table;
-- a READ COMMITTED commit step that finds the lock taken raises the clocks of its keys for it
-- (outbox._snapshot_producers_open). Shared: these transactions never wait for each other; the
-- lock is taken once per statement (a lock this transaction holds costs a lookup). Its keys are
-- the trigger's arguments: outbox._snapshot_lock_class() and the queue_id, so that a producer needs
-- no privilege to run it.
CREATE OR REPLACE FUNCTION outbox.tg_queue__snapshot_producer()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(TG_ARGV[0]::integer, TG_ARGV[1]::integer);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER TRUNCATE trigger (pgdrain_truncate) of every queue table: the rows are
-- gone, so is everything derived from them. Deletes the queue's partition heads (they would point
-- at rows that no longer exist, with floors above the ids a RESTART IDENTITY hands out again) and
-- its clocks (they would make every later commit "late") and wake notes, and forgets this transaction's note of the
-- table for its commit step (their rows went with the TRUNCATE). The built-mark stays: an empty
-- table's heads are complete. TRUNCATE holds ACCESS EXCLUSIVE until the transaction ends, so no
-- producer or claim of the table is in flight; a rolled back TRUNCATE takes these deletes with it.
-- The queue is found by the table (TG_RELID), not by an argument, so re-registration never leaves
-- the trigger pointing elsewhere.
CREATE OR REPLACE FUNCTION outbox.tg_queue__truncate()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
BEGIN
  DELETE FROM outbox.partition_heads h USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND h.queue_id = q.queue_id;
  DELETE FROM outbox.partition_clocks c USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND c.queue_id = q.queue_id;
  DELETE FROM outbox.partition_wakes w USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND w.queue_id = q.queue_id;
  -- Ids still cached by sessions count as given out before this point (RESTART IDENTITY has already
  -- reset the sequence here, so the base is then where it starts again).
  UPDATE outbox.queues q SET clock_base = COALESCE(pg_catalog.pg_sequence_last_value(q.id_sequence), 0)
  WHERE q.table_oid = TG_RELID;
  DELETE FROM outbox.commit_notes n
  WHERE n.xid = pg_catalog.pg_current_xact_id_if_assigned() AND n.table_oid = TG_RELID;
  -- The first statement's notes (a SERIALIZABLE transaction's: all) are in its hook (outbox._note_written).
  UPDATE outbox.commit_hooks h
  SET (table_oids, keys, ids) = (
        SELECT pg_catalog.array_agg(u.table_oid ORDER BY u.n), pg_catalog.array_agg(u.k ORDER BY u.n),
               pg_catalog.array_agg(u.id ORDER BY u.n)
        FROM unnest(h.table_oids, h.keys, h.ids) WITH ORDINALITY AS u(table_oid, k, id, n)
        WHERE u.table_oid <> TG_RELID)
  WHERE h.xid = pg_catalog.pg_current_xact_id_if_assigned() AND TG_RELID = ANY (h.table_oids);
  RETURN NULL;
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
  SELECT '0.1.0'::text, 30;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The max_partitions partitions whose oldest pending row is older than older_than, oldest first,
-- with their head and why it is not moving. Reads outbox.partition_heads, so its cost follows the
-- number of partitions with pending work, not the backlog.
CREATE OR REPLACE FUNCTION outbox.wedged_partitions(queue text, older_than interval, max_partitions integer DEFAULT 10)
RETURNS TABLE(partition_key text, head_id bigint, head_attempt_count integer, head_last_error text,
              oldest_pending_at timestamptz, pending bigint, reason text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'wedged_partitions';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF v_q.partition_column IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('queue %s has no partition column', v_q.queue));
  END IF;
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  IF max_partitions IS NULL OR max_partitions < 1 OR max_partitions > 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_partitions must be between 1 and 10000, got %s', COALESCE(max_partitions::text, 'NULL')));
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT h.partition_key, t.id, t.attempt_count, t.last_error, t.created_at,
            (SELECT pg_catalog.count(*) FROM %1$s p WHERE p.%2$I = t.%2$I AND p.sent_at IS NULL AND p.attempt_count < $2),
            CASE
              WHEN t.leased_until > pg_catalog.now() THEN ''leased until '' || t.leased_until
              WHEN t.next_attempt_at > pg_catalog.now() THEN ''backing off until '' || t.next_attempt_at
                   || '' after '' || t.attempt_count || '' attempts''
              ELSE ''ready, waiting for a drainer'' END
     FROM outbox.partition_heads h
     JOIN %1$s t ON t.id = h.head_id
     WHERE h.queue_id = $1 AND t.created_at < pg_catalog.now() - $3
     ORDER BY t.created_at
     LIMIT $4', v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, older_than, max_partitions;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Functions made by generators before this migration (each partitioned queue's heads trigger, its
-- late-rows function, the kept statements of outbox._prepared) search pg_catalog, then pg_temp, as
-- every function above now does: with search_path = '' PostgreSQL still searches the session's
-- temporary schema first for types and relations, so a caller's temporary domain named text or
-- regclass ran its CHECK as the owner of a SECURITY DEFINER function (docs/security.md).
DO $$
DECLARE
  v_fn regprocedure;
BEGIN
  FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'outbox'::regnamespace AND 'search_path=""' = ANY (p.proconfig)
              ORDER BY p.oid LOOP
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp', v_fn);
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
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
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
  outbox.release_lease(text, bigint)
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
-- Gives a queue table its event_id column (the event's stable identity, DESIGN "Identity and order
-- of an event") when it has none: nullable and with a default for new rows, so adding it is a
-- catalog change, not a rewrite of a large table under an exclusive lock. Rows written before have
-- NULL, and the claims hand out a uuid derived from the queue and id instead (outbox._event_id_of).
-- An existing column of another type is refused.
CREATE OR REPLACE FUNCTION outbox._add_event_id(p_rel regclass)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_type text;
  v_default text;
BEGIN
  SELECT pg_catalog.format_type(a.atttypid, a.atttypmod), pg_catalog.pg_get_expr(d.adbin, d.adrelid)
    INTO v_type, v_default
  FROM pg_catalog.pg_attribute a
  LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attrelid = p_rel AND a.attname = 'event_id' AND NOT a.attisdropped;
  IF NOT FOUND THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN event_id uuid', p_rel);
  ELSIF v_type <> 'uuid' THEN
    PERFORM outbox._invalid('create_queue', pg_catalog.format(
      'queue table %s has an event_id column of type %s; pgdrain needs uuid (the event''s stable identity)', p_rel, v_type));
  END IF;
  IF v_default IS NULL THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN event_id SET DEFAULT pg_catalog.gen_random_uuid()', p_rel);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Applies the wake notes producers left for a queue (outbox.partition_wakes, see
-- outbox.tg_queue__commit): a committed row of the note's key whose head a claim held at the
-- time. Each noted partition gets what the producer could not write itself: a head if it has
-- none, an empty head pointed at the row and woken, a floor lowered to the row. Notes of a head
-- that is still held stay for a later claim; a bounded number per call, oldest first.
-- Returns the keys it applied, for the caller to refresh.
CREATE OR REPLACE FUNCTION outbox._apply_wakes(p_q outbox.queues)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_notes tid[];
  v_keys text[];
  v_lows bigint[];
  v_done text[];
BEGIN
  SELECT pg_catalog.array_agg(w.ctid) INTO v_notes
  FROM (SELECT x.ctid FROM outbox.partition_wakes x WHERE x.queue_id = p_q.queue_id
        LIMIT 256 FOR UPDATE SKIP LOCKED) w;
  IF v_notes IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT pg_catalog.array_agg(s.k ORDER BY s.k), pg_catalog.array_agg(s.lo ORDER BY s.k)
    INTO v_keys, v_lows
  FROM (SELECT w.partition_key AS k, pg_catalog.min(w.low_id) AS lo FROM outbox.partition_wakes w
        WHERE w.ctid = ANY (v_notes) GROUP BY 1) s;

  -- Heads we can lock now (or that do not exist: made here) take the note; the others wait.
  WITH held AS (
    SELECT h.partition_key FROM outbox.partition_heads h
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
    FOR NO KEY UPDATE SKIP LOCKED),
  fixed AS (
    UPDATE outbox.partition_heads h
    SET head_id = COALESCE(h.head_id, u.lo),
        parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
        floor_id = LEAST(h.floor_id, u.lo)
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k AND u.k IN (SELECT held.partition_key FROM held)
    RETURNING h.partition_key),
  made AS (
    INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
    -- Floor 0: notes of the key beyond this call's may hold smaller ids.
    SELECT p_q.queue_id, u.k, u.lo, 0
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                      WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
    ORDER BY u.k
    ON CONFLICT (queue_id, partition_key) DO NOTHING
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(k) INTO v_done
  FROM (SELECT fixed.partition_key AS k FROM fixed UNION ALL SELECT made.partition_key FROM made) d;

  DELETE FROM outbox.partition_wakes w
  WHERE w.ctid = ANY (v_notes) AND w.partition_key = ANY (v_done);
  RETURN v_done;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Exponential backoff with equal jitter: the n-th retry waits between half and all of
-- min * 2^(n-1), capped at max, and never less than min.
CREATE OR REPLACE FUNCTION outbox._backoff(p_attempt integer, p_min interval, p_max interval)
RETURNS interval
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT GREATEST(p_min, d / 2 + d / 2 * pg_catalog.random())
  FROM (SELECT LEAST(p_max, p_min * pg_catalog.power(2, LEAST(GREATEST(p_attempt, 1) - 1, 30))) AS d) s;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- batch_size must be 1..10000: a claim larger than that holds too many rows in one statement.
CREATE OR REPLACE FUNCTION outbox._check_batch_size(p_function text, p_batch_size integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  IF p_batch_size IS NULL OR p_batch_size < 1 OR p_batch_size > 10000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'batch_size must be between 1 and 10000, got %s', COALESCE(p_batch_size::text, 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates a caller-chosen time of a row's next attempt (enqueue's deliver_at, a worker's
-- retry_at) against the queue's max_delay: at most max_delay after the clock, so that no producer
-- or peer can park a row (and on a partitioned queue every later event of its key) for ever. NULL
-- elements are fine (no time given). The queue table's CHECK pgdrain_next_attempt_at_within_max_delay
-- (outbox._guard_next_attempt_at) holds a plain INSERT or UPDATE to the same bound; this check comes
-- first so that a call names its argument (22023) instead of a constraint. p_elements: name the
-- element of an array argument in the message.
CREATE OR REPLACE FUNCTION outbox._check_delay(p_function text, p_argument text, p_q outbox.queues,
                                               p_times timestamptz[], p_elements boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_bad timestamptz;
  v_n bigint;
BEGIN
  IF p_times IS NULL THEN
    RETURN;
  END IF;
  SELECT u.at, u.n INTO v_bad, v_n
  FROM unnest(p_times) WITH ORDINALITY AS u(at, n)
  WHERE u.at > pg_catalog.clock_timestamp() + p_q.max_delay
  LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      '%s must be at most the queue''s max_delay (%s) from now, got %s%s', p_argument, p_q.max_delay, v_bad,
      CASE WHEN p_elements THEN pg_catalog.format(' (element %s)', v_n) ELSE '' END));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A lease must be positive and at most one day: longer leases only hide crashed workers.
CREATE OR REPLACE FUNCTION outbox._check_lease(p_function text, p_lease interval)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '1 day' THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'lease must be greater than 0 and at most 1 day, got %s', COALESCE(p_lease::text, 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- An array argument must be one-dimensional (or empty, or NULL: other checks decide about those).
-- A multidimensional array would be flattened by unnest() and refused by array_position() with a
-- raw 0A000, so it is refused here, naming the argument. Takes array_ndims() of the argument, so
-- one function serves arrays of every type.
CREATE OR REPLACE FUNCTION outbox._check_one_dimension(p_function text, p_argument text, p_ndims integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  IF p_ndims > 1 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      '%s must be a one-dimensional array, got %s dimensions', p_argument, p_ndims));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates the parallel arrays of a batch of results: one-dimensional, same lengths, at most
-- 10000, no NULL or duplicate id, every outcome one of 'sent', 'transient', 'permanent'.
CREATE OR REPLACE FUNCTION outbox._check_outcomes(p_function text, p_ids bigint[], p_outcomes text[],
                                                  p_errors text[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
DECLARE
  v_bad text;
BEGIN
  IF p_ids IS NULL THEN
    PERFORM outbox._invalid(p_function, 'ids must not be NULL');
  END IF;
  PERFORM outbox._check_one_dimension(p_function, 'ids', pg_catalog.array_ndims(p_ids));
  PERFORM outbox._check_one_dimension(p_function, 'outcomes', pg_catalog.array_ndims(p_outcomes));
  PERFORM outbox._check_one_dimension(p_function, 'errors', pg_catalog.array_ndims(p_errors));
  IF pg_catalog.cardinality(p_ids) > 10000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'ids must have at most 10000 elements, got %s', pg_catalog.cardinality(p_ids)));
  END IF;
  IF p_outcomes IS NULL OR pg_catalog.cardinality(p_outcomes) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'outcomes must have as many elements as ids (%s), got %s', pg_catalog.cardinality(p_ids),
      COALESCE(pg_catalog.cardinality(p_outcomes)::text, 'NULL')));
  END IF;
  IF p_errors IS NOT NULL AND pg_catalog.cardinality(p_errors) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'errors must be NULL or have as many elements as ids (%s), got %s',
      pg_catalog.cardinality(p_ids), pg_catalog.cardinality(p_errors)));
  END IF;
  IF pg_catalog.array_position(p_ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(p_function, 'ids must not contain NULL');
  END IF;
  IF (SELECT pg_catalog.count(DISTINCT x) FROM pg_catalog.unnest(p_ids) x) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, 'ids must be distinct');
  END IF;
  SELECT o INTO v_bad FROM pg_catalog.unnest(p_outcomes) o
  WHERE o IS NULL OR o NOT IN ('sent', 'transient', 'permanent') LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'outcome must be ''sent'', ''transient'' or ''permanent'', got %s',
      COALESCE(pg_catalog.quote_literal(v_bad), 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates an operator's reason for an action on rows: a non-blank text of at most 1000
-- characters, recorded in the row's last_error and in outbox.operator_actions.
CREATE OR REPLACE FUNCTION outbox._check_reason(p_function text, p_reason text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  IF p_reason IS NULL OR pg_catalog.btrim(p_reason) = '' OR pg_catalog.length(p_reason) > 1000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'reason must be a non-blank text of at most 1000 characters, got %s',
      COALESCE(pg_catalog.quote_literal(pg_catalog.left(p_reason, 50)), 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates the retry_at argument of apply_result(s) and settle_locked: a caller-chosen time for a
-- row's next attempt (a peer's Retry-After), given only with the outcome 'transient', finite. NULL
-- (the whole array, or one element) keeps the queue's exponential backoff.
CREATE OR REPLACE FUNCTION outbox._check_retry_at(p_function text, p_ids bigint[], p_outcomes text[],
                                                  p_retry_at timestamptz[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
DECLARE
  v_bad integer;
BEGIN
  IF p_retry_at IS NULL THEN
    RETURN;
  END IF;
  PERFORM outbox._check_one_dimension(p_function, 'retry_at', pg_catalog.array_ndims(p_retry_at));
  IF pg_catalog.cardinality(p_retry_at) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be NULL or have as many elements as ids (%s), got %s',
      pg_catalog.cardinality(p_ids), pg_catalog.cardinality(p_retry_at)));
  END IF;
  SELECT u.n INTO v_bad FROM unnest(p_retry_at, p_outcomes) WITH ORDINALITY AS u(at, outcome, n)
  WHERE u.at IS NOT NULL AND u.outcome IS DISTINCT FROM 'transient' LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be NULL unless the outcome is ''transient'' (element %s)', v_bad));
  END IF;
  SELECT u.n INTO v_bad FROM unnest(p_retry_at) WITH ORDINALITY AS u(at, n)
  WHERE u.at IN ('infinity', '-infinity') LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be a finite time (element %s)', v_bad));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- run_length must be 1..1000: how many rows of one partition a claim takes (1 = the seed's claim).
CREATE OR REPLACE FUNCTION outbox._check_run_length(p_function text, p_run_length integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  IF p_run_length IS NULL OR p_run_length < 1 OR p_run_length > 1000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'run_length must be between 1 and 1000, got %s', COALESCE(p_run_length::text, 'NULL')));
  END IF;
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
--
-- p_run > 1 (claim_batch's and claim_locked's run_length): with each head claimed, the rows that
-- follow it in its partition (outbox._claim_run), up to p_run per partition and p_batch_size in
-- all, so that a partition's run costs one head search and, recorded together, one head write.
CREATE OR REPLACE FUNCTION outbox._claim(p_q outbox.queues, p_batch_size integer, p_lease interval, p_mode text,
                                         p_run integer)
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

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
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
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started, false);
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

    -- Lease mode leases what it locks in the same statement (one statement planned, not two).
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
       SELECT pg_catalog.array_agg(claimed.id), pg_catalog.array_agg(claimed.key::text) FROM claimed',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type,
      CASE WHEN p_mode = 'lease'
           THEN pg_catalog.format(
             -- By the version picked locked (a TID scan), not by id: a second index probe per row.
             -- A version newer than the statement's snapshot (a concurrent release committed
             -- between the snapshot and the lock) is not leased; its head counts as stale below.
             -- With its table: a ctid names a row only within one table, and a queue table
             -- partitioned by range has one per partition (each with its own (0,1)).
             'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $6
              FROM picked WHERE u.ctid = picked.version AND u.tableoid = picked.version_table
              RETURNING u.id, picked.key', v_table)
           ELSE 'SELECT picked.id, picked.key FROM picked' END),
      'bigint[], integer, bigint[], text[], timestamptz, timestamptz', 'TABLE(pgdrain_ids bigint[], pgdrain_keys text[])')
      INTO v_ids, v_claimed_keys USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now, v_until;

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
          pg_catalog.round(v_rows_per_head, 2) || ',' || v_run_hint_since, false);
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
SET search_path = ''
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
-- Lock mode (seed 001's claim transaction): the same deliverable rows as claim_batch, locked
-- FOR UPDATE SKIP LOCKED by the caller's open transaction until it ends. No lease is written: the
-- row lock is the fence, and settle_locked records outcomes in the same transaction, so each row
-- is written once. The claimed ids are remembered in a transaction-local setting for settle_locked.
--
-- The body of claim_locked and claim_locked_runs (fn names the caller in errors).
-- run_length > 1 (claim_locked_runs): as claim_runs, each partition's head with the
-- rows that follow it, up to run_length per partition and batch_size in all, in id order; settle
-- what was applied, a partition's rows up to its first failure (the rest stay untouched).
CREATE OR REPLACE FUNCTION outbox._claim_locked(fn text, queue text, batch_size integer, run_length integer)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_setting text;
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  PERFORM outbox._check_run_length(fn, run_length);
  -- _claim leaves out the rows this transaction already holds (SKIP LOCKED does not skip our own
  -- locks), so a row is never handed out twice.
  v_ids := outbox._claim(v_q, batch_size, NULL, 'lock', run_length);
  v_setting := 'pgdrain.held_' || v_q.queue_id;
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    RETURN;  -- not even a query: id = ANY('{}') would let the planner pick any partial index
  END IF;
  PERFORM pg_catalog.set_config(v_setting,
    pg_catalog.concat_ws(',', NULLIF(pg_catalog.current_setting(v_setting, true), ''),
                         pg_catalog.array_to_string(v_ids, ',')), true);
  -- With its plan kept (outbox._prepared): planned on every call, reading back a batch of 32 cost
  -- 3x what it does kept (145-205 -> 49 µs per call).
  RETURN QUERY EXECUTE outbox._prepared(v_q.queue_id, pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.created_at, %s, t.headers
     FROM %s t WHERE t.id = ANY ($1) ORDER BY %s',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    outbox._event_id_of(v_q), v_q.table_oid::regclass,
    CASE WHEN run_length > 1 THEN 't.id' ELSE 't.attempt_count, t.id' END),
    'bigint[]', 'TABLE(pgdrain_id bigint, pgdrain_event_type text, pgdrain_payload jsonb, pgdrain_partition_key text, '
    'pgdrain_attempt_count integer, pgdrain_created_at timestamptz, pgdrain_event_id uuid, pgdrain_headers jsonb)')
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
SET search_path = ''
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
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether a producer of a queue that notifies 'when_waiting' (outbox.set_notify) must NOTIFY: a
-- drainer said it waits for one (outbox.drainer_waits) and has not been woken since. Takes the
-- queue's notify gate shared, held until the transaction ends: a drainer marks itself waiting only
-- while no producer holds it, so a producer that found no drainer waiting commits (its rows
-- visible) before any drainer can start to wait, and that drainer's claim after marking sees them.
-- A shared lock never waits for another producer; it waits for a drainer only while one marks
-- itself, which is one setval inside outbox.drainer_waits (never a drainer's transaction or
-- latency). Queues that notify 'always' answer true without a lock.
-- A producer's transaction that set pgdrain.notify to 'off' (SET LOCAL pgdrain.notify = off) never
-- notifies: a transaction that executed NOTIFY can not be prepared (PREPARE TRANSACTION, two-phase
-- commit), so such producers opt out, and drainers find their rows by their poll fallback.
-- Arguments: the queue, and its drainer_waits_q<queue_id> sequence.
CREATE OR REPLACE FUNCTION outbox._drainer_waits(p_q outbox.queues)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
BEGIN
  IF pg_catalog.current_setting('pgdrain.notify', true) = 'off' THEN
    RETURN false;
  END IF;
  IF p_q.notify = 'always' THEN
    RETURN true;
  END IF;
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_q.queue_id, -4);
  RETURN COALESCE(pg_catalog.pg_sequence_last_value(
                    pg_catalog.to_regclass('outbox.drainer_waits_q' || p_q.queue_id)), 0)
         > (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Drops every function of schema outbox whose name matches the regular expression p_name (the
-- functions made per queue: kept statements, late-rows functions, a dropped queue's all) and
-- returns how many.
CREATE OR REPLACE FUNCTION outbox._drop_functions(p_name text)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_fn regprocedure;
  v_dropped integer := 0;
BEGIN
  FOR v_fn IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ p_name
  LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_fn);
    v_dropped := v_dropped + 1;
  END LOOP;
  RETURN v_dropped;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The insert behind enqueue and enqueue_event (p_function names the caller in errors): validates
-- the event and inserts it, returning its id (provisional until COMMIT on a partitioned queue, see
-- DESIGN "Identity and order of an event") and its event_id. deliver_at delays the first attempt,
-- at most the queue's max_delay (it is the row's next_attempt_at; on a partitioned queue it holds back the key's later events
-- too, which keep their order). headers (an object of strings) travel with the event to the sink.
CREATE OR REPLACE FUNCTION outbox._enqueue(p_function text, p_queue text, p_event_type text, p_payload jsonb,
                                           p_partition_key text, p_deliver_at timestamptz, p_headers jsonb,
                                           p_event_id uuid)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(p_function, p_queue);
  v_key_column text := '';
  v_key_value text := '';
BEGIN
  IF p_event_type IS NULL OR pg_catalog.btrim(p_event_type) = '' THEN
    PERFORM outbox._invalid(p_function, 'event_type must be a non-empty string');
  END IF;
  IF p_payload IS NULL THEN
    PERFORM outbox._invalid(p_function, 'payload must not be NULL (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF pg_catalog.jsonb_typeof(p_payload) = 'null' THEN
    PERFORM outbox._invalid(p_function, 'payload must not be JSON null (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF p_deliver_at IN ('infinity', '-infinity') THEN
    PERFORM outbox._invalid(p_function, 'deliver_at must be a finite time (NULL: deliver now)');
  END IF;
  PERFORM outbox._check_delay(p_function, 'deliver_at', v_q, ARRAY[p_deliver_at], false);
  IF p_headers IS NOT NULL AND (pg_catalog.jsonb_typeof(p_headers) <> 'object'
                                OR pg_catalog.jsonb_path_exists(p_headers, '$.* ? (@.type() != "string")')) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'headers must be NULL or a JSON object whose values are strings, got %s', pg_catalog.left(p_headers::text, 200)));
  END IF;
  IF v_q.partition_column IS NULL THEN
    IF p_partition_key IS NOT NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be NULL: queue %s has no partition column', v_q.queue));
    END IF;
  ELSE
    IF p_partition_key IS NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must not be NULL: queue %s is partitioned by %s', v_q.queue, v_q.partition_column));
    END IF;
    IF pg_catalog.btrim(p_partition_key) = '' THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be a non-empty string, got %s', pg_catalog.quote_literal(p_partition_key)));
    END IF;
    v_key_column := pg_catalog.format(', %I', v_q.partition_column);
    v_key_value := pg_catalog.format(', $6::%s', v_q.partition_type);
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO %s AS t (event_type, payload, next_attempt_at, headers, event_id%s)
     VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.gen_random_uuid())%s)
     RETURNING t.id, t.event_id',
    v_q.table_oid::regclass, v_key_column, v_key_value)
    USING p_event_type, p_payload, p_deliver_at, p_headers, p_event_id, p_partition_key;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The SQL expression, over a queue table aliased t, of a row's event_id: the column, or for a row
-- written before its table had the column (adopted, or registered before migration 00007) a uuid
-- derived from the queue and the row's id, the same on every claim.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox._event_id_of(p_q outbox.queues)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  RETURN pg_catalog.format('COALESCE(t.event_id, pg_catalog.md5(%L || t.id::text)::uuid)', p_q.queue || '/');
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
SET search_path = ''
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
-- Drops every queue's kept statements (the functions outbox._prepared makes, _q<queue_id>_<hash>)
-- and returns how many: each is made again by the first call that needs it. A kept statement is
-- named for its text, so one a migration changed is never called again but stays until drop_queue;
-- a migration that changes statements calls this in its after-step. A claim that looked one up
-- just before it was dropped fails once ("function does not exist") and is retried by its drainer.
CREATE OR REPLACE FUNCTION outbox._forget_kept_statements()
RETURNS integer
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT outbox._drop_functions('^_q[0-9]+_[0-9a-f]{24}$');
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The queue table's CHECK pgdrain_next_attempt_at_within_max_delay: next_attempt_at at most the
-- queue's max_delay after the clock when a row is written, so that a plain INSERT (by a role
-- granted next_attempt_at) can not park a key for ever either; the functions check the same bound
-- first, naming their argument (outbox._check_delay). The bound is read from the clock when the row
-- is written, so a row that met it still meets it later: an UPDATE of it never fails for it, nor
-- does a restore (pg_restore loads the rows after the time they were written). Made again when
-- max_delay changes (p_replace), NOT VALID unless the table is new (p_validate): rows written under
-- a larger limit keep their time (and nothing updates a parked row without writing a new one).
-- Backoffs stay within it: create_queue requires max_delay >= backoff_max.
CREATE OR REPLACE FUNCTION outbox._guard_next_attempt_at(p_rel regclass, p_max_delay interval, p_replace boolean,
                                                         p_validate boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_name constant text := 'pgdrain_next_attempt_at_within_max_delay';
BEGIN
  IF p_replace THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I', p_rel, v_name);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conrelid = p_rel AND k.conname = v_name) THEN
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s ADD CONSTRAINT %I CHECK (next_attempt_at IS NULL OR next_attempt_at <= pg_catalog.clock_timestamp() + %L::interval)%s',
      p_rel, v_name, p_max_delay, CASE WHEN p_validate THEN '' ELSE ' NOT VALID' END);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- What a queue table enforces on its writers, (re)applied by create_queue and by migration 00004 to
-- queues registered before it. Idempotent.
--  * CHECK constraints that name their rule: pgdrain_attempt_count_not_negative,
--    pgdrain_payload_not_json_null (outbox._payload_check), pgdrain_headers_string_object
--    (headers: NULL or an object of strings) and, for a string partition column,
--    pgdrain_partition_key_not_empty (not empty or blank): a plain INSERT is held to the rules
--    enqueue checks.
--    On an adopted table (p_adopted) they are NOT VALID (no scan of the history), and one that a
--    pending row already breaks is left out with a WARNING: a CHECK is tested on every UPDATE, so it
--    would make that row's claim fail forever. Pending rows are read once, through the claim index.
--  * pgdrain_producer (when the role exists) may INSERT only the event's columns (every column but
--    the ones that steer delivery: id, attempt_count, next_attempt_at, sent_at, leased_until,
--    lease_token, last_error), SELECT (id, event_id) for RETURNING, and use the id's sequence.
--  * The AFTER TRUNCATE trigger pgdrain_truncate (outbox.tg_queue__truncate).
CREATE OR REPLACE FUNCTION outbox._guard_queue_table(p_rel regclass, p_partition_column text,
                                                     p_adopted boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_check record;
  v_broken boolean;
  v_columns text;
  v_sequence text;
BEGIN
  -- A payload check made before 00025 reads the whole payload on every UPDATE: replaced, NOT VALID
  -- (no scan: the rows were checked by the old expression, which says the same).
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
             WHERE k.conrelid = p_rel AND k.conname = 'pgdrain_payload_not_json_null'
               AND pg_catalog.pg_get_constraintdef(k.oid) NOT LIKE '%pg_column_size%') THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT pgdrain_payload_not_json_null, '
                              'ADD CONSTRAINT pgdrain_payload_not_json_null CHECK (%s) NOT VALID',
                              p_rel, outbox._payload_check());
  END IF;
  FOR v_check IN
    SELECT c.name, c.expr
    FROM (VALUES ('pgdrain_attempt_count_not_negative', 'attempt_count >= 0'),
                 ('pgdrain_payload_not_json_null', outbox._payload_check()),
                 ('pgdrain_headers_string_object', 'headers IS NULL OR pg_catalog.jsonb_typeof(headers) = ''object'' '
                   || 'AND NOT pg_catalog.jsonb_path_exists(headers, ''$.* ? (@.type() != "string")'')')) AS c(name, expr)
    UNION ALL
    SELECT 'pgdrain_partition_key_not_empty', pg_catalog.format('pg_catalog.btrim(%I::text) <> ''''', p_partition_column)
    FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
    WHERE a.attrelid = p_rel AND a.attname = p_partition_column AND NOT a.attisdropped
      AND t.typcategory = 'S'
  LOOP
    CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                          WHERE k.conrelid = p_rel AND k.conname = v_check.name);
    IF p_adopted THEN
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND NOT (%s))',
                                p_rel, v_check.expr) INTO STRICT v_broken;
      IF v_broken THEN
        RAISE WARNING 'pgdrain: % not added to %: pending rows break it (it would make their claim fail); run create_queue again once they are delivered',
          v_check.name, p_rel;
        CONTINUE;
      END IF;
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%s)%s', p_rel, v_check.name,
                              v_check.expr, CASE WHEN p_adopted THEN ' NOT VALID' ELSE '' END);
  END LOOP;

  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'pgdrain_producer') THEN
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO v_columns
    FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = p_rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
      AND a.attname NOT IN ('id', 'attempt_count', 'next_attempt_at', 'sent_at', 'leased_until',
                            'lease_token', 'last_error');
    -- Revoking the table-level privilege also revokes every column-level one.
    EXECUTE pg_catalog.format('REVOKE INSERT ON %s FROM pgdrain_producer', p_rel);
    EXECUTE pg_catalog.format('GRANT INSERT (%s), SELECT (id, event_id) ON %s TO pgdrain_producer', v_columns, p_rel);
    v_sequence := COALESCE(outbox._id_sequence(p_rel)::text,
                           pg_catalog.pg_get_serial_sequence(p_rel::text, 'id'));
    IF v_sequence IS NOT NULL THEN
      EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %s TO pgdrain_producer', v_sequence);
    END IF;
  END IF;

  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', p_rel);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT
       EXECUTE FUNCTION outbox.tg_queue__truncate()', p_rel);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The sequence a queue table's id comes from, or NULL: the identity's sequence, or the one sequence
-- a default of exactly nextval('that_sequence') uses (serial, or a sequence that is not OWNED BY the
-- column: found through the default's dependency in pg_depend, which pg_get_serial_sequence does not
-- follow). Only an ascending sequence counts. The commit step renumbers late rows with nextval of
-- it (outbox.queues.id_sequence), so a partitioned queue needs one (create_queue refuses otherwise).
CREATE OR REPLACE FUNCTION outbox._id_sequence(p_rel regclass)
RETURNS regclass
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_attnum smallint;
  v_identity "char";
  v_seq regclass;
  v_expr text;
BEGIN
  SELECT a.attnum, a.attidentity INTO v_attnum, v_identity
  FROM pg_catalog.pg_attribute a
  WHERE a.attrelid = p_rel AND a.attname = 'id' AND NOT a.attisdropped;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF v_identity <> '' THEN
    v_seq := pg_catalog.pg_get_serial_sequence(p_rel::text, 'id')::regclass;
  ELSE
    SELECT d.refobjid::regclass, pg_catalog.pg_get_expr(ad.adbin, ad.adrelid) INTO v_seq, v_expr
    FROM pg_catalog.pg_attrdef ad
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid = ad.oid
                               AND d.refclassid = 'pg_catalog.pg_class'::regclass
    JOIN pg_catalog.pg_class s ON s.oid = d.refobjid AND s.relkind = 'S'
    WHERE ad.adrelid = p_rel AND ad.adnum = v_attnum
    ORDER BY d.refobjid
    LIMIT 1;
    -- Anything but a bare nextval of it (nextval(...) * 2, coalesce of two sequences) does not
    -- give ids in the sequence's order.
    IF v_expr IS DISTINCT FROM pg_catalog.format('nextval(%L::regclass)', v_seq::text) THEN
      v_seq := NULL;
    END IF;
  END IF;
  IF v_seq IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_sequence s WHERE s.seqrelid = v_seq AND s.seqincrement > 0) THEN
    v_seq := NULL;
  END IF;
  RETURN v_seq;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue the two hints its claims share (see outbox._claim), as UNLOGGED
-- sequences: a sequence is not versioned, so moving it on every claim leaves no dead tuple behind
-- for anyone to walk, whatever holds the xmin horizon back, and costs no WAL; after a crash both
-- start again from nothing, which only costs one scan from the front.
--   outbox.claim_front_q<queue_id>  when (epoch milliseconds) a claim last searched the ready heads
--                                   from the front: one claim per second per queue does;
--   outbox.claim_start_q<queue_id>  the fresh head id where that search stopped, moved on by every
--                                   lease-mode claim past it: a claim without a cursor of its own
--                                   starts there, past the dead entries the drain left in front, and a
--                                   lease-mode claim with one starts there when it is further.
-- Made by create_queue; dropped by drop_queue.
CREATE OR REPLACE FUNCTION outbox._install_claim_hints(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
BEGIN
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_start_q' || p_q.queue_id);
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_front_q' || p_q.queue_id);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue its commit-step triggers:
-- - pgdrain_heads, a statement-level AFTER INSERT trigger running a function made for this queue,
--   outbox.tg_queue__heads_q<queue_id>, whose one statement names the partition column
--   statically, so PL/pgSQL plans it once per session instead of on every statement (a generic
--   function would need a dynamic EXECUTE). It notes the key and id of each new row for the commit
--   step, as outbox._note_written does; the first statement of a transaction, which inserts its
--   hook, inlined (one function call less on the usual transaction), later ones and SERIALIZABLE
--   transactions by calling it.
-- - pgdrain_snapshot, a statement-level BEFORE INSERT trigger that fires only in REPEATABLE READ
--   and SERIALIZABLE transactions (its WHEN costs a READ COMMITTED statement no function call):
--   outbox.tg_queue__snapshot_producer announces the transaction before it takes an id, so that
--   READ COMMITTED commit steps keep the clocks those transactions read (docs/ordering.md).
-- And makes the function of the commit step's late-rows statement (outbox._late_rows_function).
-- Made again by every create_queue, so they always match the registration (nothing else
-- reinstalls the triggers: run create_queue again if one was dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write the notes.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  v_function constant text := 'outbox.' || pg_catalog.quote_ident('tg_queue__heads_q' || p_q.queue_id);
BEGIN
  EXECUTE pg_catalog.format(
    $f$CREATE OR REPLACE FUNCTION %1$s()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = ''
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
DECLARE
  v_more boolean;
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- Noted in the hook, see outbox._note_written.
    PERFORM outbox._note_written(TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id))
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
    RETURN NULL;
  END IF;
  -- The transaction's first statement notes in its hook; later ones in outbox.commit_notes, the
  -- first of them marking the hook (true comes back only from that update; nothing from later ones).
  INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
  SELECT pg_catalog.pg_current_xact_id(), pg_catalog.array_agg(TG_RELID), pg_catalog.array_agg(n.%3$I::text),
         pg_catalog.array_agg(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.count(*) > 0
  ON CONFLICT (xid) DO UPDATE SET more_notes = true WHERE NOT h.more_notes
  RETURNING h.more_notes INTO v_more;
  IF v_more OR NOT FOUND THEN
    INSERT INTO outbox.commit_notes (table_oid, keys, ids)
    SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id)
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
  END IF;
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', p_q.table_oid::regclass);
  EXECUTE pg_catalog.format(
    $f$CREATE TRIGGER pgdrain_snapshot BEFORE INSERT ON %s FOR EACH STATEMENT
       WHEN (pg_catalog.current_setting('transaction_isolation') <> 'read committed')
       EXECUTE FUNCTION outbox.tg_queue__snapshot_producer(%s, %s)$f$,
    p_q.table_oid::regclass, outbox._snapshot_lock_class(), p_q.queue_id);
  -- The commit step's late-rows statement, made now rather than by a producer's commit, and made
  -- again: its name says the table and column it reads, not the statement, so a migration that
  -- changes the statement (and reinstalls these triggers, as migrations do) replaces it here.
  PERFORM outbox._drop_functions('^_q' || p_q.queue_id || '_late_');
  PERFORM outbox._late_rows_function(p_q);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a queue its NOTIFY machinery as its registration says: the sequence in which drainers say
-- until when they wait (outbox.drainer_waits_q<queue_id>, UNLOGGED: not versioned, so a producer in
-- any snapshot reads the latest value, and moving it leaves no dead tuple and no WAL; after a crash
-- it starts from nothing, which reads as "nobody waits" while the drainers' LISTEN connections
-- reconnect, and reconnecting wakes them), readable by every producer; and for an unpartitioned
-- queue the statement trigger pgdrain_notify (outbox.tg_queue__notify), whose arguments say whether
-- it notifies always or only when a drainer waits. A partitioned queue has no NOTIFY trigger: its
-- commit step notifies (outbox._commit_keys). The arguments name the sequence, never carry its oid:
-- pg_dump writes them as they are, and a restored database gives the sequence another oid.
-- With it, the sequence in which its drainers take turns to claim while rows trickle in
-- (outbox.claim_turn_q<queue_id>, UNLOGGED for the same reasons; see outbox.claim_turn).
-- Made by create_queue and outbox.set_notify; dropped by drop_queue.
CREATE OR REPLACE FUNCTION outbox._install_notify_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  v_sequence constant text := 'outbox.' || pg_catalog.quote_ident('drainer_waits_q' || p_q.queue_id);
  v_rel constant regclass := p_q.table_oid::regclass;
BEGIN
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS %s', v_sequence);
  EXECUTE pg_catalog.format('GRANT SELECT ON SEQUENCE %s TO PUBLIC', v_sequence);
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_turn_q' || p_q.queue_id);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
  IF p_q.partition_column IS NOT NULL THEN
    RETURN;
  END IF;
  IF p_q.notify = 'always' THEN
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, p_q.channel, p_q.queue);
  ELSE
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L, %L, %L)', v_rel, p_q.channel, p_q.queue,
      p_q.queue_id, v_sequence);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Raises the package's argument error: SQLSTATE 22023, message '<function>: <what is wrong>'.
-- Every validation goes through here so that codes and message shapes stay one API.
CREATE OR REPLACE FUNCTION outbox._invalid(p_function text, p_message text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  RAISE EXCEPTION '%: %', p_function, p_message USING ERRCODE = '22023';
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lateness as a READ COMMITTED commit step sees it, with its commit locks taken (outbox._commit_keys):
-- per key (aligned with p_keys; p_los and p_his our smallest and largest id of each), the largest id
-- of a row of the key that another transaction committed above our smallest, NULL when there is
-- none: our rows must be renumbered past it. Delivered rows count too, so that a key's ids never go
-- down in delivery order. Read from the queue table itself, so that the commit locks need not write
-- a clock (docs/ordering.md): one range of the primary key, from our smallest id to the last id the
-- sequence gave out, whose rows all came after ours; our own rows are known by xmin, and other
-- transactions' uncommitted rows are not visible.
-- The range holds every row any producer wrote since our first one. When it is long (a transaction
-- that stayed open while thousands of other rows were written) every key is taken for late, past
-- the last id given out: renumbering our rows costs less than reading all of theirs, and is always
-- right (a new id is larger than every id given out so far).
--
-- The statement names the queue's table, so it runs in a function made for the queue and its
-- table as registered and named now (outbox._late_rows_function), which keeps its plan for the
-- session. This runs on every producer's commit, so it calls the function directly (one EXECUTE of
-- a call) instead of going through outbox._prepared.
CREATE OR REPLACE FUNCTION outbox._late_rows(p_q outbox.queues, p_keys text[], p_los bigint[], p_his bigint[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_issued constant bigint := pg_catalog.pg_sequence_last_value(p_q.id_sequence);
  v_from bigint := p_los[1];
  v_to bigint := p_his[1];
  v_own bigint := 1;
  v_late bigint[];
BEGIN
  -- One key (the usual transaction): simple expressions only, no query.
  IF pg_catalog.cardinality(p_los) > 1 THEN
    SELECT pg_catalog.min(x.id), pg_catalog.max(x.id), pg_catalog.count(DISTINCT x.id) INTO v_from, v_to, v_own
    FROM unnest(p_los || p_his) AS x(id);
  END IF;
  -- No id given out since ours, or every id from our first to the last given out is one of ours
  -- (one statement of many rows, no other producer between): nobody can have committed a larger
  -- one. (Ids are the primary key: an id of ours is nobody else's.)
  IF v_issued IS NULL OR v_from IS NULL OR v_issued <= v_from
     OR (v_issued <= v_to AND v_own = v_to - v_from + 1) THEN
    RETURN NULL;
  END IF;
  IF v_issued - v_from > 4096 + 2 * (v_to - v_from) THEN
    RETURN pg_catalog.array_fill(v_issued, ARRAY[pg_catalog.cardinality(p_keys)]);
  END IF;
  EXECUTE outbox._late_rows_function(p_q) INTO v_late
    USING p_keys, p_los, pg_catalog.pg_current_xact_id()::text::bigint, v_from, v_issued;
  RETURN v_late;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The function that runs outbox._late_rows' statement for a queue, made for the queue and its table
-- as registered and named now: outbox._q<queue_id>_late_<hash of the table and column>, static
-- SQL, so PL/pgSQL keeps its plan for the session. A renamed table or column finds no function of
-- its name and gets one. Made by create_queue (so that producers' commits do not make it) and
-- otherwise by the first commit that needs it, as outbox._prepared makes its functions (the commit
-- step runs as the schema owner, under a try-lock); when it can not be made now (another session is
-- making it, a read-only transaction, DDL refused), the statement itself runs this once.
-- drop_queue drops it with the queue's other functions.
-- Returns the statement to EXECUTE with $1..$5 = keys, our smallest id of each, our transaction's
-- full id, our smallest id, the last id given out.
CREATE OR REPLACE FUNCTION outbox._late_rows_function(p_q outbox.queues)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_table constant text := p_q.table_oid::regclass::text;
  v_name constant text := '_q' || p_q.queue_id || '_late_' || pg_catalog.left(
    pg_catalog.md5(v_table || '|' || p_q.partition_column), 16);
  v_sql text;
BEGIN
  IF pg_catalog.to_regproc('outbox.' || v_name) IS NOT NULL THEN
    RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
  END IF;
  -- One pass over the range, whatever the number of keys: a key's membership is a lookup in a
  -- jsonb object of our keys, and the answer per key another (no join: this runs under the commit
  -- step's planner settings, and a nested loop over thousands of keys would be quadratic). A
  -- visible row whose xmin is in progress is ours (a savepoint's): its full xid, widened from 32
  -- bits against ours ($3), as outbox._written_here does.
  v_sql := pg_catalog.format(
    'SELECT pg_catalog.array_agg(CASE WHEN (m.j ->> u.k)::bigint > u.lo THEN (m.j ->> u.k)::bigint END ORDER BY u.n)
     FROM (SELECT pg_catalog.jsonb_object_agg(r.k, r.hi) AS j
           FROM (SELECT t.%2$I::text AS k, pg_catalog.max(t.id) AS hi
                 FROM %1$s t
                 WHERE t.id > $4 AND t.id <= $5
                   AND (SELECT pg_catalog.jsonb_object_agg(x.k, true) FROM unnest($1::text[]) AS x(k)) ? t.%2$I::text
                   AND t.xmin::text::bigint <> $3 %% 4294967296
                   AND pg_catalog.pg_xact_status(($3 + ((t.xmin::text::bigint - ($3 %% 4294967296) + 6442450944) %% 4294967296
                                                       - 2147483648))::text::xid8) <> ''in progress''
                 GROUP BY 1) r) m
     CROSS JOIN unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(k, lo, n)',
    v_table, p_q.partition_column);
  IF pg_catalog.current_setting('transaction_read_only') = 'off'
     AND pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name)) THEN
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) RETURNS bigint[] LANGUAGE plpgsql STABLE
         SET search_path = '''' AS %L', v_name, 'BEGIN RETURN (' || v_sql || '); END');
      EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) FROM PUBLIC', v_name);
      EXECUTE pg_catalog.format('COMMENT ON FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) IS %L', v_name,
        'pgdrain: the late-rows statement of queue ' || p_q.queue_id || ' (outbox._late_rows; internal)');
      RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
  END IF;
  RETURN v_sql;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Returns the first of p_ids whose row this transaction does not hold FOR UPDATE, NULL when it holds
-- them all. Ownership comes from the row lock, never from a setting the caller could write.
-- Fast path: xmax is this transaction's own top-level xid (claimed at the top level). Otherwise
-- (claimed in a savepoint: xmax is the subtransaction's xid, or a MultiXact when the transaction
-- also holds a weaker lock on the row or rolled back an update of it) the rows are locked again,
-- FOR UPDATE SKIP LOCKED: a row another transaction holds is skipped; a row this transaction already
-- holds (top level, live or released savepoint) comes back and its xmax stays as it was; a row
-- nobody holds (never locked, its savepoint rolled back, or its holder ended between the two reads)
-- is locked now and gets a new xmax. So a row is ours when it comes back with the xmax it had
-- before. A lock taken here for a row that is not ours ends with the error the caller then raises.
-- Never waits; under REPEATABLE READ a row updated since the snapshot fails with 40001.
CREATE OR REPLACE FUNCTION outbox._locked_here(p_q outbox.queues, p_ids bigint[])
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_table constant regclass := p_q.table_oid::regclass;
  v_all_mine boolean;
  v_before text[];
  v_locked bigint[];
  v_foreign bigint;
BEGIN
  -- The fast path with its plan kept (outbox._prepared; planned on every call it cost 3-4x).
  -- p_ids are distinct (outbox._check_outcomes), so every row is ours when as many rows as ids
  -- have our xid as xmax.
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'SELECT pg_catalog.count(*) = pg_catalog.cardinality($1) FROM %s t WHERE t.id = ANY ($1) AND t.xmax = $2',
    v_table), 'bigint[], xid', 'TABLE(pgdrain_all_mine boolean)')
    INTO v_all_mine USING p_ids, pg_catalog.pg_current_xact_id_if_assigned()::xid;
  IF v_all_mine THEN
    RETURN NULL;
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.xmax::text ORDER BY u.ord)
     FROM pg_catalog.unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord) LEFT JOIN %s t ON t.id = u.id', v_table)
    INTO v_before USING p_ids;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id) FROM (SELECT s.id FROM %s s WHERE s.id = ANY ($1) FOR UPDATE SKIP LOCKED) t',
    v_table)
    INTO v_locked USING p_ids;
  -- A new statement reads the row headers as they are now (xmax is not versioned by the snapshot;
  -- the locking statement itself returns the values it read before locking).
  EXECUTE pg_catalog.format(
    'SELECT u.id FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS u(id, xmax_before, ord)
     LEFT JOIN %s t ON t.id = u.id
     WHERE u.id <> ALL ($3) OR t.xmax IS NULL OR t.xmax::text IS DISTINCT FROM u.xmax_before
     ORDER BY u.ord LIMIT 1', v_table)
    INTO v_foreign USING p_ids, v_before, COALESCE(v_locked, '{}');
  RETURN v_foreign;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The head of one new key of a single-row commit step (outbox.tg_queue__commit), with its floor
-- as the caller decided it (see outbox._make_heads, which makes the heads of many keys): returns
-- whether it made it. false: another session made it meanwhile, committed (ON CONFLICT DO NOTHING)
-- or still being made by an open transaction, a claim applying wake notes or rebuilding heads
-- inside a lock-mode batch; the insert would wait on that transaction's index entry until it ends
-- (issue 29), and gives up after lock_timeout instead. The caller leaves a wake note. One plain
-- INSERT: the single-row path of a producer of new keys ran outbox._make_heads' aggregate for one
-- key (a single-row producer of new keys 0.70 -> 0.75 of the minimal commit step, fsync off).
CREATE OR REPLACE FUNCTION outbox._make_head(p_queue_id integer, p_key text, p_id bigint, p_floor bigint)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET lock_timeout = '1ms'
AS $$
BEGIN
  INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
  VALUES (p_queue_id, p_key, p_id, p_floor)
  ON CONFLICT (queue_id, partition_key) DO NOTHING;
  RETURN FOUND;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END;
$$;
-- +goose StatementEnd

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
SET search_path = ''
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
-- Notes rows this transaction wrote to a partitioned queue (requeue_poisoned moving rows to the tail
-- of their keys; a producer's INSERT does the same in its generated heads trigger, see
-- outbox._install_heads_trigger) for its commit step. The transaction's first note inserts its row
-- of outbox.commit_hooks, which queues the commit step (outbox.tg_queue__commit) at COMMIT, with the
-- note in it: the usual transaction, one statement, writes no other row. Each later note is one
-- row of outbox.commit_notes, inserted and never updated, so a statement costs the same however
-- many came before it; the first of them marks the hook (more_notes), so that the commit step
-- reads outbox.commit_notes only then. A rolled back savepoint takes its notes with it, like its
-- rows (and its hook, or its mark: a later note inserts it again). It takes no lock a producer could wait for:
-- what protects its uncommitted rows from a claim that finds their partition empty is the commit
-- step's (see outbox.tg_queue__commit and outbox._refresh_heads). Nothing else writes these
-- tables, so a producer can not forge a note.
-- A SERIALIZABLE transaction notes in its hook instead (appended per statement): its commit step
-- must find its notes without an index scan, whose predicate lock on the page other producers'
-- notes go into makes unrelated SERIALIZABLE producers fail as a read/write cycle (see
-- outbox.tg_queue__commit). Its statements then cost in proportion to the notes before them.
-- Arguments: the queue table, and its rows' keys and ids (aligned).
CREATE OR REPLACE FUNCTION outbox._note_written(p_table oid, p_keys text[], p_ids bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_more boolean;
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    IF pg_catalog.cardinality(p_ids) > 0 THEN
      INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
      VALUES (pg_catalog.pg_current_xact_id(), pg_catalog.array_fill(p_table, ARRAY[pg_catalog.cardinality(p_ids)]),
              p_keys, p_ids)
      ON CONFLICT (xid) DO UPDATE
        SET table_oids = h.table_oids || EXCLUDED.table_oids, keys = h.keys || EXCLUDED.keys, ids = h.ids || EXCLUDED.ids;
    END IF;
    RETURN;
  END IF;
  IF COALESCE(pg_catalog.cardinality(p_ids), 0) = 0 THEN
    RETURN;
  END IF;
  -- Marked by the first later note's update (true comes back only from it; nothing from later ones).
  INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
  VALUES (pg_catalog.pg_current_xact_id(), pg_catalog.array_fill(p_table, ARRAY[pg_catalog.cardinality(p_ids)]),
          p_keys, p_ids)
  ON CONFLICT (xid) DO UPDATE SET more_notes = true WHERE NOT h.more_notes
  RETURNING h.more_notes INTO v_more;
  IF v_more OR NOT FOUND THEN
    INSERT INTO outbox.commit_notes (table_oid, keys, ids) VALUES (p_table, p_keys, p_ids);
  END IF;
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
-- Returns the ids changed.
CREATE OR REPLACE FUNCTION outbox._operator_act(p_q outbox.queues, p_action text, p_ids bigint[],
                                                p_attempt_count integer, p_reason text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
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
      WHEN 'poison' THEN 'attempt_count = $3, next_attempt_at = NULL, last_error = $4 || COALESCE('' (last error: '' || t.last_error || '')'', '''')'
      WHEN 'retry' THEN 'next_attempt_at = NULL'
      ELSE 'sent_at = pg_catalog.now(), next_attempt_at = NULL, last_error = $4 || COALESCE('' (last error: '' || t.last_error || '')'', '''')' END)
    INTO v_ids, v_keys
    USING p_ids, p_attempt_count, p_q.max_attempts, v_note, p_q.queue, p_action, p_reason;
  IF v_ids IS NULL THEN
    RETURN '{}';
  END IF;
  RAISE LOG 'pgdrain: % % row(s) % of queue %: %', session_user,
    CASE p_action WHEN 'poison' THEN 'poisoned' WHEN 'dismiss' THEN 'dismissed' ELSE 'retried' END,
    v_ids, p_q.queue, COALESCE(p_reason, '(no reason given)');
  IF p_q.partition_column IS NOT NULL AND p_action <> 'dismiss' THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
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
-- The expression of a queue table's CHECK pgdrain_payload_not_json_null: the payload is a JSON
-- value other than null. PostgreSQL tests every CHECK of a table on every UPDATE of a row, and a
-- row is updated at least twice (its lease or lock, its outcome): jsonb_typeof alone would read the
-- whole payload each time, and a payload stored out of line (TOAST, about 2 kB and up) would be
-- fetched, and decompressed, twice per event. Its stored size comes first: a JSON null is 12
-- bytes, so anything larger is not one and the payload itself is not read (OR stops at its first
-- true operand). Measured in docs/performance.md ("A payload read on every UPDATE").
CREATE OR REPLACE FUNCTION outbox._payload_check()
RETURNS text
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = ''
AS $$
  SELECT 'pg_catalog.pg_column_size(payload) > 64 OR pg_catalog.jsonb_typeof(payload) <> ''null''';
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The statement to EXECUTE for p_sql, a statement of queue p_queue_id built with format() whose
-- parameters $1..$n have the types p_args (comma-separated, in order): a call of a function whose
-- body is p_sql as static SQL, so its plan is made once per session instead of on every EXECUTE
-- (planning the claim, record and refresh statements cost as much as running them); p_sql itself
-- when no such function can be had. Both take the same parameters, so the caller's USING list
-- serves either. p_returns is the function's result: 'void', or 'TABLE(...)' whose columns the
-- statement's columns match exactly.
--
-- The function forces a generic plan: left to choose, the plan cache kept planning some of these
-- statements again on every call (a claim's read-back: 465 of 716 calls planned, about 50 µs
-- each), because a generic plan of `= ANY ($1)` looks dearer than a custom one for a short array.
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
  -- 'generic|': a function made before they forced generic plans is not reused.
  v_name constant text := '_q' || p_queue_id || '_' || pg_catalog.left(
    pg_catalog.md5('generic|' || p_args || '|' || p_returns || '|' || p_sql), 24);
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
        'CREATE FUNCTION outbox.%I(%s) RETURNS %s LANGUAGE plpgsql VOLATILE SET search_path = '''' '
        'SET plan_cache_mode = force_generic_plan AS %L',
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
-- The registry row of a queue, or SQLSTATE 42P01 naming the queue when it is not registered or its
-- table no longer exists (dropped outside drop_queue: every function would otherwise act on a stale
-- oid). One syscache probe, no catalog scan: it runs on every claim. The registration of a dropped
-- table stays until create_queue (which registers the new table and drops the old derived state)
-- or drop_queue.
CREATE OR REPLACE FUNCTION outbox._queue(p_function text, p_queue text)
RETURNS outbox.queues
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_name text := p_queue;
  v_row outbox.queues;
BEGIN
  -- Registered names are canonical: a name found as given needs no parsing (the usual call).
  SELECT * INTO v_row FROM outbox.queues q WHERE q.queue = p_queue;
  IF NOT FOUND THEN
    v_name := outbox._queue_name(p_function, p_queue);
    SELECT * INTO v_row FROM outbox.queues q WHERE q.queue = v_name;
  END IF;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', p_function, v_name
      USING ERRCODE = '42P01';
  END IF;
  -- pg_table_is_visible is NULL exactly when no relation has this oid (a RELOID syscache probe).
  IF pg_catalog.pg_table_is_visible(v_row.table_oid) IS NULL THEN
    RAISE EXCEPTION '%: the table of queue % no longer exists (dropped outside outbox.drop_queue): '
                    'call outbox.create_queue to register it again, or outbox.drop_queue', p_function, v_name
      USING ERRCODE = '42P01';
  END IF;
  RETURN v_row;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Classifies every index of a queue table that covers pending rows (predicate sent_at IS NULL):
-- 'partition' = (<partition column>, id), 'claim' = (attempt_count, id), anything else 'decoy'.
-- check_indexes and create_queue both read this, so they never disagree.
CREATE OR REPLACE FUNCTION outbox._queue_indexes(p_table regclass, p_partition_column text)
RETURNS TABLE(index_name text, role text, definition text, valid boolean)
LANGUAGE sql
STABLE
SET search_path = ''
AS $$
  SELECT c.relname::text,
         CASE
           WHEN cols = ARRAY[p_partition_column, 'id'] THEN 'partition'
           WHEN cols = ARRAY['attempt_count', 'id'] THEN 'claim'
           ELSE 'decoy'
         END,
         pg_catalog.pg_get_indexdef(i.indexrelid),
         i.indisvalid AND i.indisready
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
  CROSS JOIN LATERAL (
    SELECT pg_catalog.array_agg(
             CASE WHEN k.attnum = 0 THEN '(expression)' ELSE a.attname::text END ORDER BY k.ord) AS cols
    FROM pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
    LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
  ) kc
  WHERE i.indrelid = p_table
    AND i.indpred IS NOT NULL
    AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) ~ '\msent_at IS NULL\M'
    AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) !~ '\mOR\M';
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Canonical 'schema.table' for a queue argument. Only plain names are accepted (letters, digits,
-- underscores; folded to lower case like unquoted SQL); an unqualified name means schema public.
CREATE OR REPLACE FUNCTION outbox._queue_name(p_function text, p_queue text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
DECLARE
  v_parts text[];
BEGIN
  IF p_queue IS NULL THEN
    PERFORM outbox._invalid(p_function, 'queue must not be NULL');
  END IF;
  IF p_queue !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$' THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'queue must be a plain name "schema.table" (letters, digits, _), got %L', p_queue));
  END IF;
  v_parts := pg_catalog.string_to_array(pg_catalog.lower(p_queue), '.');
  IF pg_catalog.array_length(v_parts, 1) = 1 THEN
    v_parts := ARRAY['public', v_parts[1]];
  END IF;
  RETURN v_parts[1] || '.' || v_parts[2];
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
SET search_path = ''
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
-- Records outcomes for rows, the common core of apply_result(s) (p_tokens given: only rows whose
-- lease_token still matches) and settle_locked (p_tokens NULL: the caller checked it holds the
-- row locks). A row that does not qualify is not touched at all. Every outcome clears lease and
-- token together. 'transient' adds an attempt with backoff; on a partitioned queue it is capped
-- at max_attempts - 1 so a partition head is never poisoned by a transient failure. 'permanent'
-- poisons (attempt_count = max_attempts) unless the queue's policy is 'retry'.
-- A backoff is counted from the clock when the outcome is recorded, not from now() (the
-- transaction start): in lock mode the claiming transaction has been open for the whole delivery,
-- and a backoff counted from its start could be over before it is written. sent_at is a record,
-- not a deadline: it stays now(), the time of the transaction that made the row sent. A sent row's
-- last_error is cleared (its attempt_count still says how many attempts failed before): a delivered
-- row showing an old error read as a failure (issue 32).
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
     upd AS (
       -- The attempts a failure leaves are computed from the row being updated, not read in a join
       -- before it: one index probe per row instead of two.
       UPDATE %1$s t SET
         sent_at = CASE WHEN i.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = CASE WHEN i.outcome = ''sent'' THEN t.attempt_count ELSE %3$s END,
         next_attempt_at = CASE
           WHEN i.outcome = ''sent'' THEN t.next_attempt_at
           WHEN %3$s >= $6 THEN NULL
           WHEN i.retry_at IS NOT NULL THEN GREATEST(i.retry_at, $10)
           ELSE $10 + outbox._backoff(%3$s, $8, $9) END,
         last_error = CASE WHEN i.outcome = ''sent'' THEN NULL ELSE i.err END,
         leased_until = NULL,
         lease_token = NULL
       FROM input i
       WHERE t.id = i.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = i.token)
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END,
    -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts while it was
    -- leased stays poisoned.
    '(CASE WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
           ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END)'),
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
-- partition holds its head FOR KEY SHARE until it commits (outbox.tg_queue__commit), so its
-- rows never lose their head; one that finds the head locked by us leaves a wake note, applied by
-- a later claim. When the head is busy an empty head (head_id NULL) is parked for a second and
-- looked at again by a later claim.
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
  -- Each key's first pending row from its floor, poisoned or not (f), and, only when that one is
  -- poisoned, its first deliverable row past it (p): the head goes to the first deliverable row (n),
  -- and the key is "tidy" (empty, or poisoned rows to step over: floor and deletion want the lock,
  -- below) exactly when there is none or f is poisoned. One index scan per key in the usual case
  -- (a look for pending rows below the next one cost a second, with a heap fetch of the row just sent).
  v_next constant text := pg_catalog.format(
    'SELECT k.key, n.id, n.attempt_count, fl.floor_id, fl.has_head,
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
  v_locked text[];
  v_busy text[];
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  IF p_keys IS NULL OR pg_catalog.cardinality(p_keys) = 0 THEN
    RETURN;
  END IF;
  -- Point heads at their next row; partitions that are empty or stepped over poisoned rows are
  -- only collected here, so the common uncontended case writes each of them once, below.
  -- Heads that exist are updated in place (an upsert locks each row before it updates it); those
  -- that do not, or were deleted meanwhile, are made.
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH next AS (%s),
     moved AS (
       UPDATE outbox.partition_heads h
       SET head_id = next.id, attempt_count = next.attempt_count, parked_until = next.parked,
           floor_id = CASE WHEN $5 AND h.floor_id >= next.floor_id THEN GREATEST(h.floor_id, next.id)
                           ELSE h.floor_id END
       FROM next
       WHERE next.id IS NOT NULL AND NOT next.tidy AND next.has_head
         AND h.queue_id = $3 AND h.partition_key = next.key
       RETURNING h.partition_key),
     made AS (
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
       SELECT $3, next.key, next.id, next.attempt_count, next.parked, CASE WHEN $5 THEN next.id ELSE 0 END
       FROM next WHERE next.id IS NOT NULL AND NOT next.tidy
         AND next.key NOT IN (SELECT moved.partition_key FROM moved)
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until)
     SELECT pg_catalog.array_agg(next.key ORDER BY next.key) FROM next WHERE next.tidy', v_next),
    'text[], integer, integer, timestamptz, boolean', 'TABLE(pgdrain_tidy text[])')
    INTO v_tidy USING p_keys, p_q.max_attempts, p_q.queue_id, v_now, v_read_committed;
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
-- Gives a leased row back untouched, the common core of release (p_token: only while the lease is
-- the caller's) and release_lease (p_token NULL: an operator ends whatever lease the row has):
-- lease and token cleared together, no attempt counted, the partition's head refreshed and an idle
-- drainer woken. false (nothing changed) when the row was not leased (or not with p_token).
CREATE OR REPLACE FUNCTION outbox._release_row(p_q outbox.queues, p_id bigint, p_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_found boolean;
  v_key text;
BEGIN
  EXECUTE pg_catalog.format(
    'UPDATE %s t SET leased_until = NULL, lease_token = NULL
     WHERE t.id = $1 AND t.lease_token = COALESCE($2, t.lease_token) AND t.sent_at IS NULL
     RETURNING true, %s',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END)
    INTO v_found, v_key USING p_id, p_token;
  IF v_key IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY[v_key]);
  END IF;
  IF v_found THEN
    -- The row is claimable now: wake an idle drainer rather than leave it to the next poll.
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN COALESCE(v_found, false);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives this transaction's pending rows of the late keys new ids from the queue's id sequence, in
-- their order, each larger than the key's clock (the largest committed id of its hash): delivered
-- order (id order) is then commit order (see outbox.tg_queue__commit). A sequence with CACHE > 1
-- hands this session values from its own cache, which may lie below ids other sessions already
-- committed: values not above the clock are drawn and dropped until one is (at most the cache
-- size; the clock never exceeds the sequence's last value, see the caller).
-- Skipped (the key keeps id order) only when the sequence is behind the clock, which means it was
-- set back by hand (setval, ALTER SEQUENCE RESTART): a new id must not collide with a later default.
-- One statement renumbers every late row, so a bulk transaction costs a few statements, not one
-- per row.
-- Arguments: the queue's id sequence (NULL: none), every key the transaction wrote and for each
-- (aligned arrays) its smallest and largest id and, when the key is late, its clock as the caller
-- read it (NULL: not late). Returns every key with its smallest and largest id after renumbering.
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
  v_last bigint;
  v_ids bigint[];
  v_clock bigint;
  v_first bigint;
BEGIN
  v_last := COALESCE(pg_catalog.pg_sequence_last_value(p_sequence), 0);
  SELECT pg_catalog.max(u.clock) INTO v_clock
  FROM unnest(p_clocks) AS u(clock) WHERE u.clock <= v_last;
  IF p_sequence IS NOT NULL AND v_clock IS NOT NULL THEN
    -- This transaction's rows of every late key, in id order: one index range per key (LATERAL,
    -- kept as such by OFFSET 0, whatever the statistics of a table just filled say). Rows of the top transaction are known
    -- by their xmin; only others (a savepoint's, another producer's) need outbox._written_here.
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(x.id ORDER BY x.id)
       FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(k, lo, hi, clock)
       CROSS JOIN LATERAL (
         SELECT t.id FROM %s t
         WHERE t.%I = u.k::%s AND t.id BETWEEN u.lo AND u.hi AND t.sent_at IS NULL
           AND (t.xmin = $6 OR outbox._written_here(t.xmin))
         OFFSET 0) x
       WHERE u.clock <= $5',
      p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type)
      INTO v_ids USING p_keys, p_los, p_his, p_clocks, v_last,
        (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
  IF v_ids IS NULL THEN
    RETURN QUERY SELECT * FROM unnest(p_keys, p_los, p_his);
    RETURN;
  END IF;

  v_first := pg_catalog.nextval(p_sequence);
  WHILE v_first <= v_clock LOOP
    v_first := pg_catalog.nextval(p_sequence);
  END LOOP;
  -- New ids drawn in the rows' order (the CTE is not inlined, nextval being volatile, and yields
  -- in ordinality order), each above every late key's clock.
  RETURN QUERY EXECUTE pg_catalog.format(
    'WITH fresh AS (
       SELECT o.id AS old_id, CASE WHEN o.n = 1 THEN $2 ELSE pg_catalog.nextval($3) END AS new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(id, n)
       ORDER BY o.n),
     moved AS (
       UPDATE %1$s t SET id = f.new_id FROM fresh f WHERE t.id = f.old_id
       RETURNING t.%2$I::text AS k, t.id),
     -- Every key with its range: that of its moved rows if any, else the one it came with.
     spans AS (
       SELECT m.k, m.id AS lo, m.id AS hi, true AS moved FROM moved m
       UNION ALL
       SELECT u.k, u.lo, u.hi, false FROM unnest($4::text[], $5::bigint[], $6::bigint[]) AS u(k, lo, hi))
     SELECT b.k, COALESCE(pg_catalog.min(b.lo) FILTER (WHERE b.moved), pg_catalog.min(b.lo)),
            COALESCE(pg_catalog.max(b.hi) FILTER (WHERE b.moved), pg_catalog.max(b.hi))
     FROM spans b GROUP BY b.k',
    p_q.table_oid::regclass, p_q.partition_column)
    USING v_ids, v_first, p_sequence, p_keys, p_los, p_his;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables, or recomputes them (_rebuild_heads): every partition with
-- pending rows gets its head again, searched from floor 0.
-- Heads producers made since then are kept (upsert). Runs once per queue: the first claim takes
-- the queue's rebuild lock, looks again, and rebuilds; concurrent claims wait for it.
CREATE OR REPLACE FUNCTION outbox._restore_heads(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The first key of the advisory lock by which REPEATABLE READ and SERIALIZABLE producers of a queue
-- announce themselves (outbox.tg_queue__snapshot_producer; the second key is the queue_id). An
-- application that takes advisory locks with two integer keys should not use this first key.
CREATE OR REPLACE FUNCTION outbox._snapshot_lock_class()
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = ''
RETURN 1885823231;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether a REPEATABLE READ or SERIALIZABLE transaction may be writing rows of the queue (it holds
-- the shared lock of outbox.tg_queue__snapshot_producer): a READ COMMITTED commit step then raises
-- its keys' clocks, which such a transaction reads to know it is late. Otherwise it only locks them:
-- a clock written on every commit piles up a version per commit of its key while any session holds
-- back the xmin horizon, and every later commit of the key walks them (issue 29).
-- A try of the exclusive lock, let go at once: another READ COMMITTED commit step trying at the same
-- instant makes it answer true, which only costs a clock write.
-- Why no such transaction can miss a lock-only commit: docs/ordering.md.
CREATE OR REPLACE FUNCTION outbox._snapshot_producers_open(p_queue_id integer)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_class constant integer := outbox._snapshot_lock_class();
BEGIN
  IF pg_catalog.pg_try_advisory_lock(v_class, p_queue_id) THEN
    PERFORM pg_catalog.pg_advisory_unlock(v_class, p_queue_id);
    RETURN false;
  END IF;
  RETURN true;
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
-- Records 'sent', 'transient' or 'permanent' for one leased row, only while lease_token still
-- matches. false = the lease is no longer ours (expired and re-claimed, released, or already
-- recorded): then nothing in the row changed. retry_at, with 'transient' only, is when the next
-- attempt may start (a peer's Retry-After) instead of the queue's backoff.
CREATE OR REPLACE FUNCTION outbox.apply_result(queue text, id bigint, lease_token uuid, outcome text,
                                               error text DEFAULT NULL, retry_at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'apply_result';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF apply_result.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF apply_result.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  PERFORM outbox._check_outcomes(fn, ARRAY[apply_result.id], ARRAY[outcome], ARRAY[error]);
  PERFORM outbox._check_retry_at(fn, ARRAY[apply_result.id], ARRAY[outcome], ARRAY[retry_at]);
  PERFORM outbox._check_delay(fn, 'retry_at', v_q, ARRAY[retry_at], true);
  RETURN pg_catalog.cardinality(outbox._record(v_q, ARRAY[apply_result.id], ARRAY[apply_result.lease_token],
                                               ARRAY[outcome], ARRAY[error], ARRAY[retry_at])) = 1;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- apply_result for a whole batch in one round trip: one row (id, applied) per input id, in input
-- order. Rows whose token no longer matches are reported applied = false and left unchanged.
CREATE OR REPLACE FUNCTION outbox.apply_results(queue text, ids bigint[], lease_tokens uuid[], outcomes text[],
                                                errors text[] DEFAULT NULL, retry_at timestamptz[] DEFAULT NULL)
RETURNS TABLE(id bigint, applied boolean)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'apply_results';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_done bigint[];
BEGIN
  PERFORM outbox._check_outcomes(fn, ids, outcomes, errors);
  PERFORM outbox._check_retry_at(fn, ids, outcomes, retry_at);
  PERFORM outbox._check_delay(fn, 'retry_at', v_q, retry_at, true);
  PERFORM outbox._check_one_dimension(fn, 'lease_tokens', pg_catalog.array_ndims(lease_tokens));
  IF lease_tokens IS NULL OR pg_catalog.cardinality(lease_tokens) <> pg_catalog.cardinality(ids) THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'lease_tokens must have as many elements as ids (%s), got %s', pg_catalog.cardinality(ids),
      COALESCE(pg_catalog.cardinality(lease_tokens)::text, 'NULL')));
  END IF;
  IF pg_catalog.array_position(lease_tokens, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'lease_tokens must not contain NULL');
  END IF;
  IF pg_catalog.cardinality(ids) = 0 THEN
    RETURN;
  END IF;
  v_done := outbox._record(v_q, ids, lease_tokens, outcomes,
                           COALESCE(errors, pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ids)])),
                           retry_at);
  -- IN a subquery: a hashed subplan, linear in the ids (= ANY compared every id with every recorded
  -- one: 0.4 ms per call of 256 results).
  RETURN QUERY SELECT u.id, u.id IN (SELECT d FROM pg_catalog.unnest(v_done) AS d)
               FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Empty when the queue's indexes over pending rows are exactly the required ones. Otherwise one row
-- per problem: 'missing' (a required index), 'decoy' (any other index over sent_at IS NULL: the
-- plan the planner picks when statistics are stale and the queue is deep), 'invalid' (a failed
-- concurrent build).
CREATE OR REPLACE FUNCTION outbox.check_indexes(queue text)
RETURNS TABLE(problem text, index_name text, detail text)
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('check_indexes', queue);
  v_table regclass := v_q.table_oid::regclass;
BEGIN
  RETURN QUERY
  SELECT 'missing', NULL::text, pg_catalog.format('CREATE INDEX ON %s (%s) WHERE sent_at IS NULL', v_table, r.cols)
  -- quote_ident, not format('%I'): an unpartitioned queue has no partition column (NULL).
  FROM (VALUES ('partition', pg_catalog.quote_ident(v_q.partition_column) || ', id'),
               ('claim', 'attempt_count, id')) AS r(role, cols)
  WHERE (r.role = 'claim' OR v_q.partition_column IS NOT NULL)
    AND NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_table, v_q.partition_column) x
                    WHERE x.role = r.role AND x.valid)
  UNION ALL
  SELECT 'decoy', x.index_name, x.definition
  FROM outbox._queue_indexes(v_table, v_q.partition_column) x
  WHERE x.role = 'decoy' OR (x.role = 'partition' AND v_q.partition_column IS NULL)
  UNION ALL
  SELECT 'invalid', x.index_name, x.definition
  FROM outbox._queue_indexes(v_table, v_q.partition_column) x
  WHERE NOT x.valid;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lease mode: leases up to batch_size deliverable rows for `lease`, each with its own fresh
-- lease_token, in one short transaction (outbox._claim_batch). One row per partition: the seed's
-- claim; claim_runs takes a partition's next rows together.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_batch(queue text, batch_size integer DEFAULT 32, lease interval DEFAULT '30 seconds')
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_batch('claim_batch', queue, batch_size, lease, 1);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lock mode (seed 001's claim transaction): the same deliverable rows as claim_batch, locked
-- FOR UPDATE SKIP LOCKED by the caller's open transaction until it ends (outbox._claim_locked).
-- One row per partition; claim_locked_runs takes a partition's next rows together.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_locked(queue text, batch_size integer DEFAULT 32)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_locked('claim_locked', queue, batch_size, 1);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- claim_locked for partitions with several rows pending: with each partition's head, the rows that
-- follow it, up to run_length per partition and batch_size in all, locked by the caller's open
-- transaction, in id order (outbox._claim_locked). Settle what was applied: a partition's rows up
-- to its first failure (the rest stay untouched). run_length 1 is claim_locked.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_locked_runs(queue text, batch_size integer DEFAULT 32, run_length integer DEFAULT 8)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_locked('claim_locked_runs', queue, batch_size, run_length);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- claim_batch for partitions with several rows pending: with each partition's head, the rows that
-- follow it in its partition, up to run_length per partition and batch_size in all, each with its
-- own lease_token, in id order (outbox._claim_batch). Apply a partition's rows in that order and
-- stop at its first failure, giving the rest back (outbox.release) untouched; recording a
-- partition's rows in one apply_results moves its head once. run_length 1 is claim_batch.
-- Unpartitioned queues: claim_batch.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_runs(queue text, batch_size integer DEFAULT 32, lease interval DEFAULT '30 seconds',
                                             run_length integer DEFAULT 8)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_batch('claim_runs', queue, batch_size, lease, run_length);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Paces the claims of a queue's drainers together while rows trickle in (issue 29: three drainers
-- pacing each on its own claimed three times as often as one, each claim finding a third of the
-- rows, and the producers beside them paid for every claim's fixed cost). A drainer whose last
-- claim found rows but fewer than it asked for calls this before its next claim: it returns how
-- long to wait, or 0 when it is this caller's turn, which it takes (claim now). A turn is taken at
-- most once per `pause` per queue, whichever drainer asks; two that ask at the same instant may
-- both get it (a hint, not a lock). A drainer whose claims come back full does not ask.
-- The turn is the time it was last taken (epoch milliseconds, the server's clock) in the queue's
-- UNLOGGED sequence outbox.claim_turn_q<queue_id> (outbox._install_notify_trigger): no dead tuple,
-- no WAL, nothing to wait for; a queue without it (registered before it existed: call
-- outbox.set_notify again) always answers 0.
CREATE OR REPLACE FUNCTION outbox.claim_turn(queue text, pause interval)
RETURNS interval
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues;
  v_turn regclass;
  v_now_ms bigint;
  v_pause_ms bigint;
  v_last bigint;
BEGIN
  IF pause IS NULL OR pause <= interval '0' OR pause > interval '10 seconds' THEN
    PERFORM outbox._invalid('claim_turn', pg_catalog.format(
      'pause must be positive and at most 10 seconds, got %s', COALESCE(pause::text, 'NULL')));
  END IF;
  v_q := outbox._queue('claim_turn', queue);
  v_turn := pg_catalog.to_regclass('outbox.claim_turn_q' || v_q.queue_id);
  IF v_turn IS NULL THEN
    RETURN interval '0';
  END IF;
  v_now_ms := (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint;
  v_pause_ms := GREATEST((EXTRACT(epoch FROM pause) * 1000)::bigint, 1);
  v_last := pg_catalog.pg_sequence_last_value(v_turn);
  -- A turn taken in the future (the server's clock went back) is over.
  IF v_last <= v_now_ms AND v_now_ms < v_last + v_pause_ms THEN
    RETURN (v_last + v_pause_ms - v_now_ms) * interval '1 millisecond';
  END IF;
  PERFORM pg_catalog.setval(v_turn, v_now_ms);
  RETURN interval '0';
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the TRUNCATE
-- trigger and either the NOTIFY trigger (unpartitioned) or the trigger that feeds the commit step
-- (partitioned, whose commit step notifies); then registers the queue. Idempotent: calling it
-- again with new settings updates them; the partition column can not change. An adopted table keeps its rows; missing lease columns are added as
-- NULL = "free". What the table enforces on producers (CHECKs, column privileges) is
-- outbox._guard_queue_table.
-- Registration follows the table: when the registered table was dropped (or dropped and made
-- again) outside drop_queue, the new table is registered under the same queue_id and every piece
-- of state derived from the old one (partition heads, built-mark, clocks) is dropped first; heads
-- are then rebuilt from the new table's rows.
-- A partitioned queue needs the sequence its ids come from (outbox.queues.id_sequence): the commit
-- step renumbers late rows with it.
-- max_delay bounds every caller-chosen next attempt (enqueue's deliver_at, a worker's retry_at, a
-- plain INSERT of next_attempt_at: outbox._check_delay and the table's CHECK made by
-- outbox._guard_next_attempt_at), so nobody can park a key for ever.
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
  channel text DEFAULT NULL,
  max_delay interval DEFAULT '7 days')
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
  IF max_delay IS NULL OR max_delay < backoff_max OR max_delay > interval '3650 days' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_delay must be between backoff_max (%s) and 3650 days, got %s',
      backoff_max, COALESCE(max_delay::text, 'NULL')));
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

  -- A larger max_attempts does not make poisoned rows deliverable again: on a partitioned queue they
  -- would come back in front of what followed them in their keys (a 'register' after the
  -- 'unregister' delivered past it). They stay poisoned, at the new limit, until requeue_poisoned
  -- moves them to the tail of their keys. Read through the claim index (attempt_count, id).
  IF NOT v_new_table AND create_queue.max_attempts > v_old.max_attempts THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = $1, next_attempt_at = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $2 AND t.attempt_count < $1', v_rel)
      USING create_queue.max_attempts, v_old.max_attempts;
  END IF;

  -- clock_base: every id the sequence gave out so far counts as committed for per-key commit order
  -- (sessions with a cached sequence may still hand out smaller ones; their rows are then late).
  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base, max_delay)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0), create_queue.max_delay)
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence, max_delay = EXCLUDED.max_delay,
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
  PERFORM outbox._guard_next_attempt_at(v_rel, create_queue.max_delay,
                                        v_new_table OR v_old.max_delay IS DISTINCT FROM create_queue.max_delay, v_created);

  -- The NOTIFY trigger wakes drainers of an unpartitioned queue; a partitioned queue's rows become
  -- claimable at commit, where its commit step notifies (outbox._commit_keys). Both as
  -- outbox.set_notify last said (a registration keeps it).
  PERFORM outbox._install_notify_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    IF v_new_table THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: dismisses poisoned rows for good: never delivered, kept as history (sent_at set, so
-- they count neither as pending nor as poisoned; last_error says who dismissed them and why;
-- purge_sent removes them with the sent rows). Only rows that are still poisoned and not being
-- delivered right now are taken (see outbox._operator_act); returns how many. Logged in
-- outbox.operator_actions (operator_log) and the server log.
CREATE OR REPLACE FUNCTION outbox.dismiss_poisoned(queue text, ids bigint[], reason text)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'dismiss_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF ids IS NULL OR pg_catalog.cardinality(ids) NOT BETWEEN 1 AND 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('ids must have between 1 and 10000 elements, got %s',
                                                  COALESCE(pg_catalog.cardinality(ids)::text, 'NULL')));
  END IF;
  PERFORM outbox._check_one_dimension(fn, 'ids', pg_catalog.array_ndims(ids));
  IF pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  PERFORM outbox._check_reason(fn, reason);
  RETURN pg_catalog.cardinality(outbox._operator_act(v_q, 'dismiss', ids, NULL, reason));
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A drainer of a queue that notifies 'when_waiting' (outbox.set_notify) says it is about to wait up
-- to `wait` for a NOTIFY, so that producers send one. Returns its mark, a number that is 0 when the
-- queue notifies 'always' (nothing to say: wait as usual) and NULL when a producer is between its
-- check and its commit: then look again soon (claim, and call this again), do not wait long. After
-- a mark, claim once more before waiting: rows that committed before the mark sent no NOTIFY. Pass
-- the mark to outbox.drainer_woke when a NOTIFY wakes the drainer.
-- Why nothing is missed: a producer checks for a mark holding the queue's notify gate shared until
-- it commits (outbox._drainer_waits); this takes the gate exclusively without waiting, so it marks
-- only when no producer is between its check and its commit, and each producer either sees the mark
-- (and notifies) or committed before it (and the claim after the mark sees its rows).
-- The gate is held for the call only, whatever transaction it runs in. Drainers exclude each other
-- with a lock of their own (key -5, as outbox.drainer_woke, which clears a mark without the gate):
-- a mark waits up to 100 ms for it, else answers NULL like a held gate.
-- Marks only grow: a later mark replaces an earlier one, even a longer one, so drainer_woke of a
-- drainer never clears another's mark.
CREATE OR REPLACE FUNCTION outbox.drainer_waits(queue text, wait interval)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET lock_timeout = '100ms'
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
  v_mark bigint;
BEGIN
  IF wait IS NULL OR wait <= interval '0' OR wait > interval '1 day' THEN
    RAISE EXCEPTION 'drainer_waits: wait must be positive and at most 1 day, got %', COALESCE(wait::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_waits', queue);
  IF v_q.notify = 'always' THEN
    RETURN 0;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL THEN
    RAISE EXCEPTION 'drainer_waits: queue % has no sequence outbox.drainer_waits_q% (call outbox.set_notify again)',
      v_q.queue, v_q.queue_id USING ERRCODE = '55000';
  END IF;
  -- The gate is taken for this call only (a session lock, released on every way out; a
  -- transaction lock would make producers that must notify wait for the caller's transaction).
  IF NOT pg_catalog.pg_try_advisory_lock(1885823232 + v_q.queue_id, -4) THEN
    RETURN NULL;
  END IF;
  BEGIN
    PERFORM pg_catalog.pg_advisory_lock(1885823232 + v_q.queue_id, -5);
  EXCEPTION WHEN lock_not_available THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RETURN NULL;
  WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RAISE;
  END;
  BEGIN
    v_mark := GREATEST(COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0) + 1,
                       (EXTRACT(epoch FROM pg_catalog.clock_timestamp() + wait) * 1000)::bigint);
    PERFORM pg_catalog.setval(v_sequence, v_mark);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RAISE;
  END;
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
  RETURN v_mark;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A drainer that outbox.drainer_waits marked as waiting was woken by a NOTIFY: producers stop
-- notifying, unless another drainer marked itself since (marks only grow, so its mark is then not
-- this one: every drainer that LISTENs on the channel got the same NOTIFY, so clearing after one is
-- safe only when nobody marked after it). A mark of 0 (a queue that notifies 'always') does nothing.
-- Clearing needs no producer to be out of the way (it is a mark that ran out early, which the
-- protocol already allows: a drainer claims once more after every mark), so it does not take the
-- notify gate: producers that commit back to back hold it shared nearly all the time, and a clear
-- that needed it left every producer notifying, each commit queued on NOTIFY's lock, until the
-- mark ran out (PollFallback + 1 s; issue 29: producers beside one drainer at a quarter of their
-- rate). Drainers exclude each other with a lock of their own (key -5), held for the compare and
-- the setval only; one that waits 100 ms for it (someone else holds that key) lets the mark run out.
CREATE OR REPLACE FUNCTION outbox.drainer_woke(queue text, mark bigint)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET lock_timeout = '100ms'
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
BEGIN
  IF mark IS NULL OR mark < 0 THEN
    RAISE EXCEPTION 'drainer_woke: mark must be a mark outbox.drainer_waits returned (0 or more), got %',
      COALESCE(mark::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_woke', queue);
  IF mark = 0 OR v_q.notify = 'always' THEN
    RETURN;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL THEN
    RETURN;
  END IF;
  BEGIN
    PERFORM pg_catalog.pg_advisory_lock(1885823232 + v_q.queue_id, -5);
  EXCEPTION WHEN lock_not_available THEN
    RETURN;
  END;
  BEGIN
    IF pg_catalog.pg_sequence_last_value(v_sequence) = mark THEN
      PERFORM pg_catalog.setval(v_sequence, 1);
    END IF;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
    RAISE;
  END;
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -5);
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
-- Convenience insert; a plain INSERT into the queue table is equally valid (the triggers do the
-- rest). partition_key is required (and must not be empty or blank) on a partitioned queue and
-- refused on an unpartitioned one. The payload must be a JSON value other than null. deliver_at
-- delays the first attempt, headers (an object of strings) travel to the sink, event_id is the
-- event's stable identity (generated when NULL). Returns the id; outbox.enqueue_event returns the
-- event_id too.
CREATE OR REPLACE FUNCTION outbox.enqueue(queue text, event_type text, payload jsonb, partition_key text DEFAULT NULL,
                                          deliver_at timestamptz DEFAULT NULL, headers jsonb DEFAULT NULL,
                                          event_id uuid DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT e.id FROM outbox._enqueue('enqueue', queue, event_type, payload, partition_key, deliver_at, headers, event_id) e;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- enqueue, returning the event's stable identity with its id: the event_id every sink and peer
-- dedupes on (the id may change at COMMIT on a partitioned queue; the event_id never does).
CREATE OR REPLACE FUNCTION outbox.enqueue_event(queue text, event_type text, payload jsonb,
                                                partition_key text DEFAULT NULL, deliver_at timestamptz DEFAULT NULL,
                                                headers jsonb DEFAULT NULL, event_id uuid DEFAULT NULL)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT e.id, e.event_id
  FROM outbox._enqueue('enqueue_event', queue, event_type, payload, partition_key, deliver_at, headers, event_id) e;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Heartbeat: moves leased_until to clock_timestamp() + lease while lease_token still matches and
-- returns it; NULL (and nothing changed) when the lease is no longer ours. The clock, not now():
-- counted from the start of an older transaction the new lease could already be over.
CREATE OR REPLACE FUNCTION outbox.extend_lease(queue text, id bigint, lease_token uuid, lease interval)
RETURNS timestamptz
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'extend_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_until timestamptz;
  v_key text;
BEGIN
  IF extend_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF extend_lease.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  PERFORM outbox._check_lease(fn, lease);
  EXECUTE pg_catalog.format(
    'UPDATE %s t SET leased_until = pg_catalog.clock_timestamp() + $3
     WHERE t.id = $1 AND t.lease_token = $2 AND t.sent_at IS NULL
     RETURNING t.leased_until, %s',
    v_q.table_oid::regclass,
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END)
    INTO v_until, v_key USING extend_lease.id, extend_lease.lease_token, lease;
  IF v_key IS NOT NULL THEN
    UPDATE outbox.partition_heads h SET parked_until = v_until
    WHERE h.queue_id = v_q.queue_id AND h.partition_key = v_key AND h.head_id = extend_lease.id
      -- Claims no longer park the heads of leased rows (00005); one parked before still follows.
      AND h.parked_until IS NOT NULL;
  END IF;
  RETURN v_until;
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
SET search_path = ''
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
-- The operators' actions on a queue's rows (poison_row, retry_row, dismiss_poisoned), newest first:
-- at most max_rows (1..1000), below before_action_id when given (the next page). Each with the
-- login role that acted, its reason, the row's id, event_id, key and attempt count at the time.
CREATE OR REPLACE FUNCTION outbox.operator_log(queue text, max_rows integer DEFAULT 50, before_action_id bigint DEFAULT NULL)
RETURNS TABLE(action_id bigint, acted_at timestamptz, action text, id bigint, event_id uuid, partition_key text,
              attempt_count integer, reason text, acted_by text)
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'operator_log';
  v_name text := outbox._queue_name(fn, queue);
BEGIN
  IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('max_rows must be between 1 and 1000, got %s',
                                                  COALESCE(max_rows::text, 'NULL')));
  END IF;
  -- By name: the log outlives the queue's registration (drop_queue keeps it).
  RETURN QUERY
    SELECT a.action_id, a.acted_at, a.action, a.row_id, a.event_id, a.partition_key, a.attempt_count, a.reason, a.acted_by
    FROM outbox.operator_actions a
    WHERE a.queue = v_name AND (before_action_id IS NULL OR a.action_id < before_action_id)
    ORDER BY a.action_id DESC
    LIMIT max_rows;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: skips a row that will never succeed (a head a peer rejects for ever with a transient
-- error wedges its key): poisons it with a reason, so its key's later rows are delivered past it;
-- requeue_poisoned delivers it later, at the tail of its key. Fenced by what the operator saw: the
-- row must still be pending with that attempt_count (wedged_partitions' head_attempt_count) and
-- not be delivered right now (see outbox._operator_act); otherwise false and nothing changed.
-- Logged in outbox.operator_actions (operator_log) and the server log.
CREATE OR REPLACE FUNCTION outbox.poison_row(queue text, id bigint, attempt_count integer, reason text)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'poison_row';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF poison_row.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF poison_row.attempt_count IS NULL OR poison_row.attempt_count < 0 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'attempt_count must be the row''s attempt count as last seen (0 or more), got %s',
      COALESCE(poison_row.attempt_count::text, 'NULL')));
  END IF;
  PERFORM outbox._check_reason(fn, reason);
  RETURN pg_catalog.cardinality(outbox._operator_act(v_q, 'poison', ARRAY[poison_row.id], poison_row.attempt_count, reason)) = 1;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The poisoned rows of a queue for an operator's page: newest first, at most max_rows (1..1000),
-- below before_id when given (the next page). Read through the claim index (attempt_count at
-- max_attempts among unsent rows), so a page never walks the pending backlog. payload_preview (the
-- payload's first 200 characters) only for a caller whose login role may read the queue table's
-- payload column; NULL otherwise (operators are not granted payloads, docs/security.md).
CREATE OR REPLACE FUNCTION outbox.poisoned_rows(queue text, max_rows integer DEFAULT 50, before_id bigint DEFAULT NULL)
RETURNS TABLE(id bigint, event_id uuid, event_type text, partition_key text, attempt_count integer,
              last_error text, created_at timestamptz, payload_preview text)
LANGUAGE plpgsql
STABLE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
  fn constant text := 'poisoned_rows';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_payload boolean;
BEGIN
  IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('max_rows must be between 1 and 1000, got %s',
                                                  COALESCE(max_rows::text, 'NULL')));
  END IF;
  v_payload := pg_catalog.has_column_privilege(session_user, v_q.table_oid, 'payload', 'SELECT');
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id, %s, t.event_type, %s, t.attempt_count, t.last_error, t.created_at,
            CASE WHEN $4 THEN pg_catalog.left(t.payload::text, 200) END
     FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint IS NULL OR t.id < $2)
     ORDER BY t.attempt_count DESC, t.id DESC LIMIT $3',
    outbox._event_id_of(v_q),
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    v_q.table_oid::regclass)
    USING v_q.max_attempts, before_id, max_rows, v_payload;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Retention: deletes at most max_rows rows sent more than older_than ago, oldest ids first, in one
-- short statement (SKIP LOCKED, so it never waits for a drainer). Call it repeatedly until it
-- returns 0; each call is its own small transaction when called outside one.
CREATE OR REPLACE FUNCTION outbox.purge_sent(queue text, older_than interval DEFAULT '7 days', max_rows integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'purge_sent';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
BEGIN
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_rows must be between 1 and 1000000, got %s', COALESCE(max_rows::text, 'NULL')));
  END IF;
  EXECUTE pg_catalog.format(
    'WITH del AS (
       DELETE FROM %1$s t WHERE t.id = ANY (ARRAY(
         SELECT s.id FROM %1$s s WHERE s.sent_at < pg_catalog.now() - $1
         ORDER BY s.id LIMIT $2 FOR UPDATE SKIP LOCKED))
       RETURNING 1)
     SELECT pg_catalog.count(*) FROM del', v_q.table_oid::regclass)
    INTO v_count USING older_than, max_rows;
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A queue's registration as the drainers need it, so that a worker reads it through a function
-- granted to pgdrain_worker instead of needing SELECT on outbox.queues. Errors like every function
-- (42P01) when the queue is not registered.
CREATE OR REPLACE FUNCTION outbox.queue_info(queue text)
RETURNS TABLE(queue_name text, partition_column text, max_attempts integer, backoff_min interval,
              backoff_max interval, permanent_policy text, channel text, max_delay interval)
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('queue_info', queue);
BEGIN
  RETURN QUERY SELECT v_q.queue, v_q.partition_column, v_q.max_attempts, v_q.backoff_min, v_q.backoff_max,
                      v_q.permanent_policy, v_q.channel, v_q.max_delay;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a leased row back untouched: lease and token cleared, no attempt counted, claimable at
-- once. false (and nothing changed) when the lease is no longer ours.
CREATE OR REPLACE FUNCTION outbox.release(queue text, id bigint, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'release';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF release.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF release.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  RETURN outbox._release_row(v_q, release.id, release.lease_token);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: ends the lease of a stuck row now (a worker that hangs without dying holds it until
-- leased_until): lease and token cleared together, no attempt counted, claimable at once. The
-- holder's late result is then refused by the token, like any result after a lease ran out.
-- false (nothing changed) when the row is not leased (or is sent).
CREATE OR REPLACE FUNCTION outbox.release_lease(queue text, id bigint)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'release_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF release_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  RETURN outbox._release_row(v_q, release_lease.id, NULL);
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
--                    deliverable row is due;
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
SET search_path = ''
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
         SELECT t.id, GREATEST(t.next_attempt_at, t.leased_until, $3) AS due FROM %1$s t
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
       WHERE keys.k IS NOT NULL AND NOT n.noted) s
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
-- Operator: gives poisoned rows (all of them, or the given ids) a fresh start: attempt_count 0,
-- due now, last_error kept for the record. Returns how many rows were requeued.
-- On a partitioned queue a requeued row goes to the TAIL of its key, as if committed now: it gets a
-- new id from the queue's sequence and is delivered after every row of its key committed before
-- the requeue, never before a successor that was already delivered (an old "register" must not
-- come back after the "unregister" that followed it without the operator asking for exactly that;
-- see docs/ordering.md). The rows then go through the producers' commit step (outbox._note_written):
-- order against concurrent producers, heads, NOTIFY. Their event is the same; only the position moves.
CREATE OR REPLACE FUNCTION outbox.requeue_poisoned(queue text, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'requeue_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
  v_old bigint[];
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  IF ids IS NOT NULL AND pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  IF v_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL, lease_token = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
      v_q.table_oid::regclass)
      USING v_q.max_attempts, ids;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
      PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
    END IF;
    RETURN v_count;
  END IF;

  IF v_q.id_sequence IS NULL THEN
    RAISE EXCEPTION '%: queue % has no id sequence to move requeued rows to the tail of their keys (call outbox.create_queue again)',
      fn, v_q.queue USING ERRCODE = '55000';
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
    v_q.table_oid::regclass)
    INTO v_old USING v_q.max_attempts, ids;
  IF v_old IS NULL THEN
    RETURN 0;
  END IF;
  -- A REPEATABLE READ or SERIALIZABLE requeue announces itself before it takes ids, as a
  -- producer's insert does (outbox.tg_queue__snapshot_producer).
  IF v_q.partition_column IS NOT NULL AND pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(outbox._snapshot_lock_class(), v_q.queue_id);
  END IF;
  -- New ids in the order of the old ones (generate_series yields in order, nextval runs per row).
  EXECUTE pg_catalog.format(
    'WITH moved AS (
       SELECT o.old_id, n.new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(old_id, i)
       JOIN (SELECT g.i, pg_catalog.nextval($3) AS new_id FROM pg_catalog.generate_series(1, $4) AS g(i)) n
         ON n.i = o.i),
     upd AS (
       UPDATE %1$s t SET id = m.new_id, attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                         lease_token = NULL, event_id = %3$s
       FROM moved m WHERE t.id = m.old_id AND t.sent_at IS NULL AND t.attempt_count >= $2
       RETURNING t.id, t.%2$I::text AS key)
     SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
            COALESCE(pg_catalog.sum(n), 0)
     FROM (SELECT upd.key AS k, pg_catalog.min(upd.id) AS lo, pg_catalog.max(upd.id) AS hi, pg_catalog.count(*) AS n
           FROM upd GROUP BY 1) s',
    v_q.table_oid::regclass, v_q.partition_column, outbox._event_id_of(v_q))
    INTO v_keys, v_mins, v_maxs, v_count USING v_old, v_q.max_attempts, v_q.id_sequence, pg_catalog.cardinality(v_old);
  IF v_keys IS NULL THEN
    RETURN 0;
  END IF;
  -- Each key's first and last moved row: what the commit step needs of them.
  PERFORM outbox._note_written(v_q.table_oid, v_keys || v_keys, v_mins || v_maxs);
  -- The commit step notifies only for heads it creates or wakes; a requeue is an operator asking
  -- for delivery now, so say so whatever the heads were.
  PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: retries a backing-off row now (ends its backoff; no attempt is counted), e.g. once the
-- peer it failed on is fixed. Fenced by what the operator saw: the row must still be pending, backing
-- off, with that attempt_count, and not be delivered right now (see outbox._operator_act);
-- otherwise false and nothing changed. Logged in outbox.operator_actions (operator_log) and the
-- server log; reason is optional.
CREATE OR REPLACE FUNCTION outbox.retry_row(queue text, id bigint, attempt_count integer, reason text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'retry_row';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF retry_row.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF retry_row.attempt_count IS NULL OR retry_row.attempt_count < 0 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'attempt_count must be the row''s attempt count as last seen (0 or more), got %s',
      COALESCE(retry_row.attempt_count::text, 'NULL')));
  END IF;
  IF reason IS NOT NULL THEN
    PERFORM outbox._check_reason(fn, reason);
  END IF;
  RETURN pg_catalog.cardinality(outbox._operator_act(v_q, 'retry', ARRAY[retry_row.id], retry_row.attempt_count, reason)) = 1;
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
-- Lock mode: records outcomes for rows this transaction claimed with claim_locked and still holds.
-- Refuses (SQLSTATE 55000, nothing changed) any id this transaction does not hold: the id must be
-- in claim_locked's list for this transaction and its row lock must be this transaction's, taken at
-- the top level or in a savepoint that is still open or was released (a rolled-back savepoint
-- took its lock, and its part of the list, with it). Returns how many rows were recorded. A
-- settled row leaves the held set, so it is recorded at most once per claim: settling it again is
-- refused like any row not held (else a second 'transient' would count a second attempt).
CREATE OR REPLACE FUNCTION outbox.settle_locked(queue text, ids bigint[], outcomes text[], errors text[] DEFAULT NULL,
                                                retry_at timestamptz[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'settle_locked';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_held bigint[];
  v_foreign bigint;
  v_count bigint;
BEGIN
  PERFORM outbox._check_outcomes(fn, ids, outcomes, errors);
  PERFORM outbox._check_retry_at(fn, ids, outcomes, retry_at);
  PERFORM outbox._check_delay(fn, 'retry_at', v_q, retry_at, true);
  IF pg_catalog.cardinality(ids) = 0 THEN
    RETURN 0;
  END IF;
  v_held := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting('pgdrain.held_' || v_q.queue_id, true), ''), ',')::bigint[];
  -- NOT IN a subquery: a hashed subplan, linear in the ids (<> ALL compared every id with every held
  -- one).
  SELECT x INTO v_foreign FROM pg_catalog.unnest(ids) x
  WHERE x NOT IN (SELECT h FROM pg_catalog.unnest(v_held) AS h) LIMIT 1;
  IF NOT FOUND THEN
    -- The setting is only a list any session could SET LOCAL: the row lock itself must be ours
    -- too (outbox._locked_here: claim_locked's FOR UPDATE, in this transaction or one of its
    -- live savepoints).
    v_foreign := outbox._locked_here(v_q, ids);
  END IF;
  IF v_foreign IS NOT NULL THEN
    RAISE EXCEPTION '%: row % of % is not held by this transaction (claim it with claim_locked in the same transaction)',
      fn, v_foreign, v_q.queue USING ERRCODE = '55000';
  END IF;
  v_count := pg_catalog.cardinality(outbox._record(v_q, ids, NULL, outcomes,
    COALESCE(errors, pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ids)])), retry_at));
  PERFORM pg_catalog.set_config('pgdrain.held_' || v_q.queue_id,
    COALESCE((SELECT pg_catalog.string_agg(h::text, ',') FROM pg_catalog.unnest(v_held) h
              WHERE h NOT IN (SELECT i FROM pg_catalog.unnest(ids) AS i)), ''),
    true);
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- One row of gauges for metrics. Exact counts from one pass over the pending rows through the
-- (attempt_count, id) partial index: cost follows the pending backlog, never the sent history.
-- pending = unsent and not poisoned; ready = pending, due and not leased; leased = lease live;
-- backing_off = pending with next_attempt_at in the future; poisoned = attempt_count >= max.
CREATE OR REPLACE FUNCTION outbox.stats(queue text)
RETURNS TABLE(pending bigint, ready bigint, leased bigint, backing_off bigint, poisoned bigint,
              oldest_pending_at timestamptz, oldest_pending_age interval)
LANGUAGE plpgsql
STABLE
SET search_path = ''
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
            pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1),
            pg_catalog.now() - pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1)
     FROM %s t WHERE t.sent_at IS NULL AND t.attempt_count >= 0', v_q.table_oid::regclass)
    USING v_q.max_attempts;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), queued by the first note of a transaction (see
-- outbox._note_written and the generated heads triggers), fires at COMMIT. It takes every note of
-- the transaction (the first statement's are in the hook, which it deletes anyway: a transaction
-- of one statement reads and deletes nothing else) and hands each partitioned queue's keys and ids to
-- outbox._commit_keys in queue_id order: the commit locks of all transactions are taken in one
-- global order, and committing transactions never deadlock. The usual transaction, one row written
-- in one statement under READ COMMITTED, is done here in scalar statements (see below).
-- Immediate constraints (SET CONSTRAINTS ALL IMMEDIATE, which ORMs and migration tools issue) fire
-- it inside the producing statement that queued it (trigger depth above 1): it then defers itself
-- to COMMIT (sets its own constraint DEFERRED and queues itself again) and takes no lock. Run there,
-- it would hold its commit locks until the transaction ends, and two producers writing two keys in
-- opposite order would deadlock (issue 29). SET CONSTRAINTS ... IMMEDIATE after rows were written
-- still runs it at once, at depth 1 (its locks are then held until the transaction ends); rows
-- written after that queue it again, for COMMIT.
-- Few statements, each simple, by index (these tables churn, and their statistics say they are
-- empty): every one is an executor start on the producer's write path, and so is every function
-- called and every planner setting it pins (a function of its own for the one-row path, with its
-- settings, cost about 30 µs of a 110 µs commit step).
CREATE OR REPLACE FUNCTION outbox.tg_queue__commit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
  v_notes outbox.commit_notes[];
  v_q outbox.queues;
  v_merged record;
  v_notified boolean;
  v_hook tid;
  v_oids oid[];
  v_keys text[];
  v_ids bigint[];
  v_requeued outbox.commit_hooks;
  v_more boolean;
  v_hooked record;
  v_key text;
  v_id bigint;
  v_head bigint;
  v_floor bigint;
  v_write_clock boolean;
  v_exists boolean;
  v_sure boolean;
BEGIN
  IF pg_catalog.pg_trigger_depth() > 1 THEN
    SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
    -- Found by the arbiter and moved by ctid, as below: no predicate lock in SERIALIZABLE.
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (NEW.xid)
    ON CONFLICT (xid) DO UPDATE SET xid = EXCLUDED.xid
    RETURNING h.ctid INTO v_hook;
    DELETE FROM outbox.commit_hooks h WHERE h.ctid = v_hook RETURNING h.* INTO v_requeued;
    INSERT INTO outbox.commit_hooks VALUES (v_requeued.*);
    RETURN NULL;
  END IF;
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- The notes are in the hook (outbox._note_written), which is found by the arbiter of its
    -- primary key and deleted by ctid: neither takes a predicate lock (an index scan would lock
    -- the page the next producer's hook goes into, a read/write dependency on it; three
    -- overlapping producers of unrelated keys then failed with 40001). No note rows to read.
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (NEW.xid)
    ON CONFLICT (xid) DO UPDATE SET xid = EXCLUDED.xid
    RETURNING h.ctid, h.table_oids, h.keys, h.ids INTO v_hook, v_oids, v_keys, v_ids;
    DELETE FROM outbox.commit_hooks h WHERE h.ctid = v_hook;
  ELSE
    -- The first statement's notes are in the hook (as a TRUNCATE in the transaction left them),
    -- later statements' in outbox.commit_notes (outbox._note_written).
    -- With the queue of the first statement's table, in the same statement. The transaction may
    -- have dropped a table it wrote: nothing of it is left to order.
    DELETE FROM outbox.commit_hooks h WHERE h.xid = NEW.xid
    RETURNING h.table_oids, h.keys, h.ids, h.more_notes,
              (SELECT q FROM outbox.queues q
               WHERE q.table_oid = h.table_oids[1] AND q.partition_column IS NOT NULL
                 AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL) AS q
      INTO v_hooked;
    v_oids := v_hooked.table_oids;
    v_keys := v_hooked.keys;
    v_ids := v_hooked.ids;
    v_more := v_hooked.more_notes;
    -- (No notes in the hook: a heads trigger made before 00025 notes every statement in
    -- outbox.commit_notes.)
    IF v_more OR v_ids IS NULL THEN
      -- The whole row (RETURNING n), not its columns: an array of the CTE's own row type would be
      -- converted to outbox.commit_notes[] through text, element by element (about 3 µs a commit).
      WITH taken AS (DELETE FROM outbox.commit_notes n WHERE n.xid = NEW.xid RETURNING n)
      SELECT pg_catalog.array_agg(t.n) INTO v_notes FROM taken t;
    ELSE
      -- One statement (the usual transaction): its keys and ids as noted.
      v_q := v_hooked.q;
      IF v_q.queue_id IS NULL OR pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN NULL;
      END IF;
      IF pg_catalog.cardinality(v_ids) > 1 OR pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, false);
        RETURN NULL;
      END IF;
      -- One row, READ COMMITTED: the steps of outbox._commit_keys in scalar statements.
      v_key := v_keys[1];
      v_id := v_ids[1];
      -- The commit lock of the key's hash, without writing the clock unless a REPEATABLE READ or
      -- SERIALIZABLE producer of the queue may be open (outbox._snapshot_producers_open, inline).
      v_write_clock := NOT pg_catalog.pg_try_advisory_lock(outbox._snapshot_lock_class(), v_q.queue_id);
      IF NOT v_write_clock THEN
        v_write_clock := NOT pg_catalog.pg_advisory_unlock(outbox._snapshot_lock_class(), v_q.queue_id);
      END IF;
      INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
      VALUES (v_q.queue_id, pg_catalog.hashtext(v_key) & 65535,
              GREATEST(v_q.clock_base, LEAST(v_id, pg_catalog.pg_sequence_last_value(v_q.id_sequence))),
              v_q.clock_base)
      ON CONFLICT (queue_id, slot) DO UPDATE
        SET previous_max = c.committed_max,
            committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
        WHERE v_write_clock;
      -- A new statement: its snapshot sees every commit that released the lock. Late when another
      -- transaction committed a row of the key with a larger id (outbox._late_rows). Asked before
      -- the head is read: a claim may raise the floor of a head we hold (docs/ordering.md, "One
      -- floor raise needs no lock") only by moving it on to a row that our question, coming first,
      -- sees pending. No id given out since ours (read under the lock): nobody committed a larger
      -- one, no question.
      IF pg_catalog.pg_sequence_last_value(v_q.id_sequence) > v_id
         AND (outbox._late_rows(v_q, v_keys, v_ids, v_ids))[1] IS NOT NULL THEN
        v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, true);
        RETURN NULL;
      END IF;
      -- The head, held until we commit (none when a claim holds it).
      SELECT x.head_id, x.floor_id INTO v_head, v_floor
      FROM outbox.partition_heads x
      WHERE x.queue_id = v_q.queue_id AND x.partition_key = v_key
      FOR KEY SHARE SKIP LOCKED;
      IF FOUND THEN
        -- A head with rows below a floor that is not above us (the usual case for a key with a
        -- backlog): done. Else a head to wake or a floor to lower.
        IF v_head IS NULL OR v_floor > v_id THEN
          v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, true);
        END IF;
        RETURN NULL;
      END IF;
      -- No head we could hold. One that exists (a claim holds it) is left to outbox._commit_keys,
      -- also one a claim's open transaction deleted: the probe above skips it (locked), this
      -- snapshot still sees it, and an insert of the key would wait on that transaction's index
      -- entry (issue 29: a lock-mode batch that delivered a key's last row held its producers at
      -- COMMIT). A new key's floor is its id only while the queue's heads are complete and no wake
      -- note waits for the key (the reasons are on outbox._make_heads). One statement for the three
      -- questions.
      SELECT EXISTS (SELECT 1 FROM outbox.partition_heads x WHERE x.queue_id = v_q.queue_id AND x.partition_key = v_key),
             EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id)
             AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                             WHERE w.queue_id = v_q.queue_id AND w.partition_key = v_key)
        INTO v_exists, v_sure;
      IF v_exists THEN
        v_notified := outbox._commit_keys(v_q, v_keys, v_ids, v_ids, true);
        RETURN NULL;
      END IF;
      -- A new key (the other usual case): its head, made as outbox._commit_keys makes it.
      IF NOT outbox._make_head(v_q.queue_id, v_key, v_id, CASE WHEN v_sure THEN v_id ELSE 0 END) THEN
        -- Made meanwhile by another session, maybe a claim's open transaction: a wake note.
        INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id) VALUES (v_q.queue_id, v_key, v_id);
      END IF;
      IF outbox._drainer_waits(v_q) THEN
        PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
      END IF;
      RETURN NULL;
    END IF;
  END IF;
  -- Many statements, maybe several queues (or a SERIALIZABLE transaction's hook): each queue's
  -- keys and ids, merged.
  FOR v_merged IN
    SELECT q, m.keys, m.ids
    FROM (SELECT u.table_oid, pg_catalog.array_agg(u.k) AS keys, pg_catalog.array_agg(u.id) AS ids
          FROM (SELECT n.table_oid, x.k, x.id
                FROM pg_catalog.unnest(v_notes) n CROSS JOIN LATERAL unnest(n.keys, n.ids) AS x(k, id)
                UNION ALL
                SELECT * FROM unnest(v_oids, v_keys, v_ids)) AS u(table_oid, k, id)
          GROUP BY u.table_oid) m
    JOIN outbox.queues q ON q.table_oid = m.table_oid
    WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
    ORDER BY q.queue_id
  LOOP
    v_notified := outbox._commit_keys(v_merged.q, v_merged.keys, v_merged.ids, v_merged.ids, false);
  END LOOP;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of an unpartitioned queue: one NOTIFY per statement
-- (PostgreSQL folds identical notifications of one transaction into one), never one per row. A
-- partitioned queue has none: its rows become claimable at commit, and its commit step
-- (outbox._commit_keys) notifies only when it made or woke a partition head; rows behind an
-- existing head are claimed when the drainer that finishes the head claims again. NOTIFY takes a
-- cluster-wide lock at commit, held through the commit's WAL flush, so concurrent producers that
-- notify commit one at a time: a queue that notifies 'when_waiting' (outbox.set_notify) skips it
-- unless a drainer waits for one (the check of outbox._drainer_waits, inlined: no lookup, its
-- arguments name the queue and sequence).
-- Arguments: channel, queue name (the payload); for 'when_waiting' also the queue_id and the name
-- of its drainer_waits_q<queue_id> sequence (a name, so a restored database finds its own; a
-- trigger made before 00025 gives an oid, which reads the same way).
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
AS $$
BEGIN
  -- Not in a transaction that set pgdrain.notify to 'off' (two-phase commit: see outbox._drainer_waits).
  IF pg_catalog.current_setting('pgdrain.notify', true) = 'off' THEN
    RETURN NULL;
  END IF;
  IF TG_NARGS > 2 THEN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + TG_ARGV[2]::integer, -4);
    IF COALESCE(pg_catalog.pg_sequence_last_value(TG_ARGV[3]::regclass), 0)
       <= (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint THEN
      RETURN NULL;
    END IF;
  END IF;
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- pgdrain_snapshot (outbox._install_heads_trigger): a REPEATABLE READ or SERIALIZABLE transaction
-- about to write rows of a partitioned queue announces itself before it
-- takes an id, with a shared transaction-level advisory lock held until it ends. Such a transaction
-- reads the key clocks in its snapshot at COMMIT and can not see later commits in the queue table;
-- a READ COMMITTED commit step that finds the lock taken raises the clocks of its keys for it
-- (outbox._snapshot_producers_open). Shared: these transactions never wait for each other; the
-- lock is taken once per statement (a lock this transaction holds costs a lookup). Its keys are
-- the trigger's arguments: outbox._snapshot_lock_class() and the queue_id, so that a producer needs
-- no privilege to run it.
CREATE OR REPLACE FUNCTION outbox.tg_queue__snapshot_producer()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
AS $$
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(TG_ARGV[0]::integer, TG_ARGV[1]::integer);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER TRUNCATE trigger (pgdrain_truncate) of every queue table: the rows are
-- gone, so is everything derived from them. Deletes the queue's partition heads (they would point
-- at rows that no longer exist, with floors above the ids a RESTART IDENTITY hands out again) and
-- its clocks (they would make every later commit "late") and wake notes, and forgets this transaction's note of the
-- table for its commit step (their rows went with the TRUNCATE). The built-mark stays: an empty
-- table's heads are complete. TRUNCATE holds ACCESS EXCLUSIVE until the transaction ends, so no
-- producer or claim of the table is in flight; a rolled back TRUNCATE takes these deletes with it.
-- The queue is found by the table (TG_RELID), not by an argument, so re-registration never leaves
-- the trigger pointing elsewhere.
CREATE OR REPLACE FUNCTION outbox.tg_queue__truncate()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
AS $$
BEGIN
  DELETE FROM outbox.partition_heads h USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND h.queue_id = q.queue_id;
  DELETE FROM outbox.partition_clocks c USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND c.queue_id = q.queue_id;
  DELETE FROM outbox.partition_wakes w USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND w.queue_id = q.queue_id;
  -- Ids still cached by sessions count as given out before this point (RESTART IDENTITY has already
  -- reset the sequence here, so the base is then where it starts again).
  UPDATE outbox.queues q SET clock_base = COALESCE(pg_catalog.pg_sequence_last_value(q.id_sequence), 0)
  WHERE q.table_oid = TG_RELID;
  DELETE FROM outbox.commit_notes n
  WHERE n.xid = pg_catalog.pg_current_xact_id_if_assigned() AND n.table_oid = TG_RELID;
  -- The first statement's notes (a SERIALIZABLE transaction's: all) are in its hook (outbox._note_written).
  UPDATE outbox.commit_hooks h
  SET (table_oids, keys, ids) = (
        SELECT pg_catalog.array_agg(u.table_oid ORDER BY u.n), pg_catalog.array_agg(u.k ORDER BY u.n),
               pg_catalog.array_agg(u.id ORDER BY u.n)
        FROM unnest(h.table_oids, h.keys, h.ids) WITH ORDINALITY AS u(table_oid, k, id, n)
        WHERE u.table_oid <> TG_RELID)
  WHERE h.xid = pg_catalog.pg_current_xact_id_if_assigned() AND TG_RELID = ANY (h.table_oids);
  RETURN NULL;
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
SET search_path = ''
AS $$
  SELECT '0.1.0'::text, 29;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The max_partitions partitions whose oldest pending row is older than older_than, oldest first,
-- with their head and why it is not moving. Reads outbox.partition_heads, so its cost follows the
-- number of partitions with pending work, not the backlog.
CREATE OR REPLACE FUNCTION outbox.wedged_partitions(queue text, older_than interval, max_partitions integer DEFAULT 10)
RETURNS TABLE(partition_key text, head_id bigint, head_attempt_count integer, head_last_error text,
              oldest_pending_at timestamptz, pending bigint, reason text)
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'wedged_partitions';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF v_q.partition_column IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('queue %s has no partition column', v_q.queue));
  END IF;
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  IF max_partitions IS NULL OR max_partitions < 1 OR max_partitions > 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_partitions must be between 1 and 10000, got %s', COALESCE(max_partitions::text, 'NULL')));
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT h.partition_key, t.id, t.attempt_count, t.last_error, t.created_at,
            (SELECT pg_catalog.count(*) FROM %1$s p WHERE p.%2$I = t.%2$I AND p.sent_at IS NULL AND p.attempt_count < $2),
            CASE
              WHEN t.leased_until > pg_catalog.now() THEN ''leased until '' || t.leased_until
              WHEN t.next_attempt_at > pg_catalog.now() THEN ''backing off until '' || t.next_attempt_at
                   || '' after '' || t.attempt_count || '' attempts''
              ELSE ''ready, waiting for a drainer'' END
     FROM outbox.partition_heads h
     JOIN %1$s t ON t.id = h.head_id
     WHERE h.queue_id = $1 AND t.created_at < pg_catalog.now() - $3
     ORDER BY t.created_at
     LIMIT $4', v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, older_than, max_partitions;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
DECLARE
  v_fn regprocedure;
BEGIN
  FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'outbox'::regnamespace AND 'search_path=pg_catalog, pg_temp' = ANY (p.proconfig)
              ORDER BY p.oid LOOP
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = ''''', v_fn);
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
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
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
  outbox.release_lease(text, bigint)
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
