-- +goose Up
-- +goose StatementBegin
-- An interval argument must not mix signs across its parts (months, days, time): PostgreSQL
-- compares intervals counting a month as 30 days and a day as 24 hours, but adds them to a time by
-- the calendar, so '-12000 mons 360001 days' passes "greater than 0 and at most 1 day" and still
-- ends 14 years in the past: a lease already over when it is given (two workers on one row), a
-- mark or a retention window that means the opposite of what the bound checked. With its parts of
-- one sign, an interval's effect differs from its comparison by a month's or a day's length at
-- most, never in sign. NULL passes (other checks decide about NULL).
CREATE OR REPLACE FUNCTION outbox._check_span(p_function text, p_argument text, p_value interval)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_months constant numeric := pg_catalog.extract('year', p_value) * 12 + pg_catalog.extract('month', p_value);
  v_days constant numeric := pg_catalog.extract('day', p_value);
  v_time constant interval := p_value - pg_catalog.make_interval(
    months => v_months::integer, days => v_days::integer);
BEGIN
  IF (v_months > 0 OR v_days > 0 OR v_time > interval '0')
     AND (v_months < 0 OR v_days < 0 OR v_time < interval '0') THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      '%s must not mix signs across its months, days and time (a month or a day has no fixed length), got %s',
      p_argument, p_value));
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
-- Validates an operator's reason for an action on rows: a text of at most 1000 characters that is
-- not only white space (spaces, tabs, line breaks, no-break and zero-width spaces), recorded in
-- the row's last_error and in outbox.operator_actions.
CREATE OR REPLACE FUNCTION outbox._check_reason(p_function text, p_reason text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_reason IS NULL OR p_reason !~ '[^[:space:]\u00a0\u200b\ufeff]' OR pg_catalog.length(p_reason) > 1000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'reason must be a non-blank text of at most 1000 characters, got %s',
      COALESCE(pg_catalog.quote_literal(pg_catalog.left(p_reason, 50)), 'NULL')));
  END IF;
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
-- p_replace (create_queue, through outbox._install_heads_trigger): the function is made again in
-- place (CREATE OR REPLACE: a producer's commit step running it meanwhile keeps working; dropped
-- and made again, it failed with "cache lookup failed for function"), and the queue's late-rows
-- functions of other names (another table or column, an older seed) are dropped.
-- The function plans its statement once per session (plan_cache_mode = force_generic_plan, with
-- the commit step's own planner settings): left to choose, PostgreSQL planned it again on every
-- call (its range of ids, as constants, looks cheaper than the generic plan's), about 250 µs of
-- each late check beside running drainers (00039; docs/performance.md). The planner settings are
-- pinned here, not taken from the caller, since the one plan is made under whatever is set then.
-- Returns the statement to EXECUTE with $1..$5 = keys, our smallest id of each, our transaction's
-- full id, our smallest id, the last id given out.
CREATE OR REPLACE FUNCTION outbox._late_rows_function(p_q outbox.queues, p_replace boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_table constant text := p_q.table_oid::regclass::text;
  -- 'pinned|': a function made before they pinned search_path = pg_catalog, pg_temp (00030; a
  -- producer's commit could still make one while that migration ran) is not reused.
  v_name constant text := '_q' || p_q.queue_id || '_late_' || pg_catalog.left(
    pg_catalog.md5('pinned|' || v_table || '|' || p_q.partition_column), 16);
  v_sql text;
BEGIN
  IF NOT p_replace AND pg_catalog.to_regproc('outbox.' || v_name) IS NOT NULL THEN
    RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
  END IF;
  IF p_replace THEN
    PERFORM outbox._drop_functions('^_q' || p_q.queue_id || '_late_(?!' || pg_catalog.substr(v_name, pg_catalog.length(v_name) - 15) || '$)');
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
     AND (p_replace OR pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name))) THEN
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) RETURNS bigint[] LANGUAGE plpgsql STABLE
         SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
         SET enable_bitmapscan = off SET jit = off AS %L', v_name, 'BEGIN RETURN (' || v_sql || '); END');
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
-- A lease must be positive and at most one day: longer leases only hide crashed workers.
CREATE OR REPLACE FUNCTION outbox._check_lease(p_function text, p_lease interval)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM outbox._check_span(p_function, 'lease', p_lease);
  IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '1 day' THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'lease must be greater than 0 and at most 1 day, got %s', COALESCE(p_lease::text, 'NULL')));
  END IF;
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
  PERFORM outbox._check_span('drainer_waits', 'wait', wait);
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
  PERFORM outbox._check_span('claim_turn', 'pause', pause);
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
  -- The default channel names the table; one too long for a channel (63 characters) keeps its
  -- first 54 and a hash of the whole name.
  v_channel text := COALESCE(channel, CASE
    WHEN pg_catalog.length('pgdrain_' || v_schema || '_' || v_table) <= 63 THEN 'pgdrain_' || v_schema || '_' || v_table
    ELSE pg_catalog.left('pgdrain_' || v_schema || '_' || v_table, 54) || '_' || pg_catalog.left(pg_catalog.md5(v_name), 8) END);
  -- Index names: the table's, or for a table name over 40 characters its first 31 and a hash
  -- (two long names alike in their first 40 made one index name: 42P07 for the second queue).
  v_index_base text := CASE WHEN pg_catalog.length(v_table) <= 40 THEN v_table
    ELSE pg_catalog.left(v_table, 31) || '_' || pg_catalog.left(pg_catalog.md5(v_table), 8) END;
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
               'sent_at', 'leased_until', 'lease_token', 'last_error', 'event_id', 'headers') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF v_col IN ('tableoid', 'xmin', 'cmin', 'xmax', 'cmax', 'ctid') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be a system column, got %L', partition_column));
  END IF;
  IF v_schema IN ('outbox', 'alr', 'core') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of pgdrain''s own schema %s, got %s', v_schema, v_name));
  END IF;
  IF v_schema = 'information_schema' OR v_schema LIKE 'pg\_%' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of the system schema %s, got %s', v_schema, v_name));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  PERFORM outbox._check_span(fn, 'backoff_min', backoff_min);
  PERFORM outbox._check_span(fn, 'backoff_max', backoff_max);
  PERFORM outbox._check_span(fn, 'max_delay', max_delay);
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_min > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('backoff_min must be at most 1 day, got %s', backoff_min));
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
  -- The registered table renamed away, another made under the queue's name: its producers write
  -- rows the queue never reads, and the old table still holds the queue's. Refused before anything
  -- changes (its heads trigger kept the old one's function: "cannot drop function").
  IF v_old.queue_id IS NOT NULL AND v_old.table_oid IS DISTINCT FROM v_rel
     AND pg_catalog.pg_table_is_visible(v_old.table_oid) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is registered for table %s, which still exists (renamed?): rename it back to %s, or drop_queue(%L) first',
      v_name, v_old.table_oid::regclass, v_name, v_name));
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
    -- A partition is delivered through its partitioned table, and an inheritance parent's
    -- statements read its children's rows too: claims would hand them out while their own heads,
    -- triggers and indexes are not pgdrain's.
    IF (SELECT c.relispartition FROM pg_catalog.pg_class c WHERE c.oid = v_rel) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s is a partition of %s: register the partitioned table instead', v_name,
        (SELECT i.inhparent::regclass FROM pg_catalog.pg_inherits i WHERE i.inhrelid = v_rel)));
    END IF;
    SELECT pg_catalog.string_agg(i.inhrelid::regclass::text, ', ' ORDER BY i.inhrelid) INTO v_other
    FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = v_rel AND NOT c.relispartition;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s must not have inheritance children (their rows would be claimed through it), got %s', v_name, v_other));
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
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row. Only
    -- when one is missing: ALTER TABLE locks the table even when it adds nothing, and create_queue
    -- run again on a registered queue (deploy scripts do) would hold up its producers and claims.
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = v_rel AND NOT a.attisdropped
          AND a.attname IN ('attempt_count', 'next_attempt_at', 'sent_at', 'leased_until', 'lease_token',
                            'last_error', 'headers')) < 7 THEN
      EXECUTE pg_catalog.format(
        'ALTER TABLE %s
           ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
           ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
           ADD COLUMN IF NOT EXISTS sent_at timestamptz,
           ADD COLUMN IF NOT EXISTS leased_until timestamptz,
           ADD COLUMN IF NOT EXISTS lease_token uuid,
           ADD COLUMN IF NOT EXISTS last_error text,
           ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    END IF;
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order. A column
      -- already NOT NULL (a registered queue's) is neither read nor altered.
      IF NOT (SELECT a.attnotnull FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col) THEN
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
          INTO STRICT v_has_nulls;
        IF v_has_nulls THEN
          PERFORM outbox._invalid(fn, pg_catalog.format(
            'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
        END IF;
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
      END IF;
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
                              v_index_base || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              v_index_base || '_pgdrain_claim', v_rel);
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
  -- An unpartitioned queue has no heads triggers (nor its function); a partitioned one's are
  -- replaced in place (outbox._install_heads_trigger). Dropped only when there: DROP TRIGGER locks
  -- the table even when there is nothing to drop.
  IF v_col IS NULL THEN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = v_rel AND t.tgname IN ('pgdrain_heads', 'pgdrain_snapshot')) THEN
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    END IF;
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  END IF;
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
  PERFORM outbox._check_span(fn, 'older_than', older_than);
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  -- Further back than the clock can subtract (22008 from now() - older_than).
  IF older_than > interval '1000 years' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('older_than must be at most 1000 years, got %s', older_than));
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
-- The poisoned rows of a queue for an operator's page: newest first, at most max_rows (1..1000),
-- below before_id when given (the next page). Read through the claim index (attempt_count at
-- max_attempts among unsent rows), so a page never walks the pending backlog. Ordered by id alone:
-- poisoned rows need not share one attempt_count (a max_attempts lowered since leaves rows above
-- it), and ordered by (attempt_count, id) a page below before_id skipped the rows of a smaller
-- count that came after it. The ids first (from the index), then their rows. payload_preview (the
-- payload's first 200 characters) only for a caller whose login role may read the queue table's
-- payload column; NULL otherwise (operators are not granted payloads, docs/security.md).
CREATE OR REPLACE FUNCTION outbox.poisoned_rows(queue text, max_rows integer DEFAULT 50, before_id bigint DEFAULT NULL)
RETURNS TABLE(id bigint, event_id uuid, event_type text, partition_key text, attempt_count integer,
              last_error text, created_at timestamptz, payload_preview text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
-- (enable_seqscan = off makes a plan that cannot avoid a scan cost about 1e10, past the JIT
-- thresholds: it was compiled on every call, 0.15-1.6 s.)
SET jit = off
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
    'SELECT t.id, %1$s, t.event_type, %2$s, t.attempt_count, t.last_error, t.created_at,
            CASE WHEN $4 THEN pg_catalog.left(t.payload::text, 200) END
     FROM %3$s t
     WHERE t.id = ANY (ARRAY(SELECT p.id FROM %3$s p
                             WHERE p.sent_at IS NULL AND p.attempt_count >= $1 AND ($2::bigint IS NULL OR p.id < $2)
                             ORDER BY p.id DESC LIMIT $3))
     ORDER BY t.id DESC',
    outbox._event_id_of(v_q),
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    v_q.table_oid::regclass)
    USING v_q.max_attempts, before_id, max_rows, v_payload;
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
-- (enable_seqscan = off makes a plan that cannot avoid a scan cost about 1e10, past the JIT
-- thresholds: it was compiled on every call, 0.15-1.6 s.)
SET jit = off
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
  v_where text;
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
    -- apply_result takes one row: no element to name.
    v_where := CASE WHEN p_function = 'apply_result' THEN '' ELSE pg_catalog.format(' (element %s)', v_bad) END;
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be NULL unless the outcome is ''transient''%s', v_where));
  END IF;
  SELECT u.n INTO v_bad FROM unnest(p_retry_at) WITH ORDINALITY AS u(at, n)
  WHERE u.at IN ('infinity', '-infinity') LIMIT 1;
  IF FOUND THEN
    v_where := CASE WHEN p_function = 'apply_result' THEN '' ELSE pg_catalog.format(' (element %s)', v_bad) END;
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be a finite time%s', v_where));
  END IF;
END;
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
  PERFORM outbox._check_delay(fn, 'retry_at', v_q, ARRAY[retry_at], false);
  RETURN pg_catalog.cardinality(outbox._record(v_q, ARRAY[apply_result.id], ARRAY[apply_result.lease_token],
                                               ARRAY[outcome], ARRAY[error], ARRAY[retry_at])) = 1;
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
  -- Blank: white space only (tabs, line breaks, no-break and zero-width spaces too).
  IF p_event_type IS NULL OR p_event_type !~ '[^[:space:]\u00a0\u200b\ufeff]' THEN
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
  SELECT '0.1.0'::text, 39;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Late-rows functions made before this migration (outbox._late_rows_function) plan their statement
-- once per session from now on, under the planner settings they pin, as the ones it makes now do.
DO $$
DECLARE
  v_fn regprocedure;
BEGIN
  FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ '^_q[0-9]+_late_'
              ORDER BY p.oid LOOP
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan', v_fn);
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET enable_seqscan = off', v_fn);
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET enable_bitmapscan = off', v_fn);
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET jit = off', v_fn);
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
DO $$
DECLARE
  v_fn regprocedure;
BEGIN
  FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ '^_q[0-9]+_late_'
              ORDER BY p.oid LOOP
    EXECUTE pg_catalog.format('ALTER FUNCTION %s RESET plan_cache_mode', v_fn);
    EXECUTE pg_catalog.format('ALTER FUNCTION %s RESET enable_seqscan', v_fn);
    EXECUTE pg_catalog.format('ALTER FUNCTION %s RESET enable_bitmapscan', v_fn);
    EXECUTE pg_catalog.format('ALTER FUNCTION %s RESET jit', v_fn);
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
-- The function that runs outbox._late_rows' statement for a queue, made for the queue and its table
-- as registered and named now: outbox._q<queue_id>_late_<hash of the table and column>, static
-- SQL, so PL/pgSQL keeps its plan for the session. A renamed table or column finds no function of
-- its name and gets one. Made by create_queue (so that producers' commits do not make it) and
-- otherwise by the first commit that needs it, as outbox._prepared makes its functions (the commit
-- step runs as the schema owner, under a try-lock); when it can not be made now (another session is
-- making it, a read-only transaction, DDL refused), the statement itself runs this once.
-- drop_queue drops it with the queue's other functions.
-- p_replace (create_queue, through outbox._install_heads_trigger): the function is made again in
-- place (CREATE OR REPLACE: a producer's commit step running it meanwhile keeps working; dropped
-- and made again, it failed with "cache lookup failed for function"), and the queue's late-rows
-- functions of other names (another table or column, an older seed) are dropped.
-- Returns the statement to EXECUTE with $1..$5 = keys, our smallest id of each, our transaction's
-- full id, our smallest id, the last id given out.
CREATE OR REPLACE FUNCTION outbox._late_rows_function(p_q outbox.queues, p_replace boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_table constant text := p_q.table_oid::regclass::text;
  -- 'pinned|': a function made before they pinned search_path = pg_catalog, pg_temp (00030; a
  -- producer's commit could still make one while that migration ran) is not reused.
  v_name constant text := '_q' || p_q.queue_id || '_late_' || pg_catalog.left(
    pg_catalog.md5('pinned|' || v_table || '|' || p_q.partition_column), 16);
  v_sql text;
BEGIN
  IF NOT p_replace AND pg_catalog.to_regproc('outbox.' || v_name) IS NOT NULL THEN
    RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
  END IF;
  IF p_replace THEN
    PERFORM outbox._drop_functions('^_q' || p_q.queue_id || '_late_(?!' || pg_catalog.substr(v_name, pg_catalog.length(v_name) - 15) || '$)');
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
     AND (p_replace OR pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name))) THEN
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) RETURNS bigint[] LANGUAGE plpgsql STABLE
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
  -- The default channel names the table; one too long for a channel (63 characters) keeps its
  -- first 54 and a hash of the whole name.
  v_channel text := COALESCE(channel, CASE
    WHEN pg_catalog.length('pgdrain_' || v_schema || '_' || v_table) <= 63 THEN 'pgdrain_' || v_schema || '_' || v_table
    ELSE pg_catalog.left('pgdrain_' || v_schema || '_' || v_table, 54) || '_' || pg_catalog.left(pg_catalog.md5(v_name), 8) END);
  -- Index names: the table's, or for a table name over 40 characters its first 31 and a hash
  -- (two long names alike in their first 40 made one index name: 42P07 for the second queue).
  v_index_base text := CASE WHEN pg_catalog.length(v_table) <= 40 THEN v_table
    ELSE pg_catalog.left(v_table, 31) || '_' || pg_catalog.left(pg_catalog.md5(v_table), 8) END;
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
               'sent_at', 'leased_until', 'lease_token', 'last_error', 'event_id', 'headers') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF v_col IN ('tableoid', 'xmin', 'cmin', 'xmax', 'cmax', 'ctid') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be a system column, got %L', partition_column));
  END IF;
  IF v_schema = 'information_schema' OR v_schema LIKE 'pg\_%' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of the system schema %s, got %s', v_schema, v_name));
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
  -- The registered table renamed away, another made under the queue's name: its producers write
  -- rows the queue never reads, and the old table still holds the queue's. Refused before anything
  -- changes (its heads trigger kept the old one's function: "cannot drop function").
  IF v_old.queue_id IS NOT NULL AND v_old.table_oid IS DISTINCT FROM v_rel
     AND pg_catalog.pg_table_is_visible(v_old.table_oid) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is registered for table %s, which still exists (renamed?): rename it back to %s, or drop_queue(%L) first',
      v_name, v_old.table_oid::regclass, v_name, v_name));
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
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row. Only
    -- when one is missing: ALTER TABLE locks the table even when it adds nothing, and create_queue
    -- run again on a registered queue (deploy scripts do) would hold up its producers and claims.
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = v_rel AND NOT a.attisdropped
          AND a.attname IN ('attempt_count', 'next_attempt_at', 'sent_at', 'leased_until', 'lease_token',
                            'last_error', 'headers')) < 7 THEN
      EXECUTE pg_catalog.format(
        'ALTER TABLE %s
           ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
           ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
           ADD COLUMN IF NOT EXISTS sent_at timestamptz,
           ADD COLUMN IF NOT EXISTS leased_until timestamptz,
           ADD COLUMN IF NOT EXISTS lease_token uuid,
           ADD COLUMN IF NOT EXISTS last_error text,
           ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    END IF;
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order. A column
      -- already NOT NULL (a registered queue's) is neither read nor altered.
      IF NOT (SELECT a.attnotnull FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col) THEN
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
          INTO STRICT v_has_nulls;
        IF v_has_nulls THEN
          PERFORM outbox._invalid(fn, pg_catalog.format(
            'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
        END IF;
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
      END IF;
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
                              v_index_base || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              v_index_base || '_pgdrain_claim', v_rel);
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
  -- An unpartitioned queue has no heads triggers (nor its function); a partitioned one's are
  -- replaced in place (outbox._install_heads_trigger). Dropped only when there: DROP TRIGGER locks
  -- the table even when there is nothing to drop.
  IF v_col IS NULL THEN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = v_rel AND t.tgname IN ('pgdrain_heads', 'pgdrain_snapshot')) THEN
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    END IF;
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  END IF;
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
  -- Further back than the clock can subtract (22008 from now() - older_than).
  IF older_than > interval '1000 years' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('older_than must be at most 1000 years, got %s', older_than));
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
  -- Further back than the clock can subtract (22008 from now() - older_than).
  IF older_than > interval '1000 years' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('older_than must be at most 1000 years, got %s', older_than));
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
-- The poisoned rows of a queue for an operator's page: newest first, at most max_rows (1..1000),
-- below before_id when given (the next page). Read through the claim index (attempt_count at
-- max_attempts among unsent rows), so a page never walks the pending backlog. Ordered by id alone:
-- poisoned rows need not share one attempt_count (a max_attempts lowered since leaves rows above
-- it), and ordered by (attempt_count, id) a page below before_id skipped the rows of a smaller
-- count that came after it. The ids first (from the index), then their rows. payload_preview (the
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
    'SELECT t.id, %1$s, t.event_type, %2$s, t.attempt_count, t.last_error, t.created_at,
            CASE WHEN $4 THEN pg_catalog.left(t.payload::text, 200) END
     FROM %3$s t
     WHERE t.id = ANY (ARRAY(SELECT p.id FROM %3$s p
                             WHERE p.sent_at IS NULL AND p.attempt_count >= $1 AND ($2::bigint IS NULL OR p.id < $2)
                             ORDER BY p.id DESC LIMIT $3))
     ORDER BY t.id DESC',
    outbox._event_id_of(v_q),
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    v_q.table_oid::regclass)
    USING v_q.max_attempts, before_id, max_rows, v_payload;
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
DROP FUNCTION outbox._check_span(text, text, interval);
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
  SELECT '0.1.0'::text, 38;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
SELECT outbox._forget_kept_statements();
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
