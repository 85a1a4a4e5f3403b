-- +goose Up
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
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_batch('claim_batch', queue, batch_size, lease, 1);
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
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_batch('claim_runs', queue, batch_size, lease, run_length);
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
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
-- apply_result for a whole batch in one round trip: one row (id, applied) per input id, in input
-- order. Rows whose token no longer matches are reported applied = false and left unchanged.
CREATE OR REPLACE FUNCTION outbox.apply_results(queue text, ids bigint[], lease_tokens uuid[], outcomes text[],
                                                errors text[] DEFAULT NULL, retry_at timestamptz[] DEFAULT NULL)
RETURNS TABLE(id bigint, applied boolean)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
-- Heartbeat: moves leased_until to clock_timestamp() + lease while lease_token still matches and
-- returns it; NULL (and nothing changed) when the lease is no longer ours. The clock, not now():
-- counted from the start of an older transaction the new lease could already be over.
CREATE OR REPLACE FUNCTION outbox.extend_lease(queue text, id bigint, lease_token uuid, lease interval)
RETURNS timestamptz
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
-- Gives a leased row back untouched: lease and token cleared, no attempt counted, claimable at
-- once. false (and nothing changed) when the lease is no longer ours.
CREATE OR REPLACE FUNCTION outbox.release(queue text, id bigint, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_locked('claim_locked_runs', queue, batch_size, run_length);
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
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
-- Operator: ends the lease of a stuck row now (a worker that hangs without dying holds it until
-- leased_until): lease and token cleared together, no attempt counted, claimable at once. The
-- holder's late result is then refused by the token, like any result after a lease ran out.
-- false (nothing changed) when the row is not leased (or is sent).
-- leased_until, when given, fences the call to the lease the operator saw: it ends only a lease
-- that ends exactly then. Without it, a lease that ran out and was taken by a healthy worker
-- between the page and the click was ended instead, and the row delivered twice at once (the
-- console passes the lease end its page showed, alr 00046).
CREATE OR REPLACE FUNCTION outbox.release_lease(queue text, id bigint, leased_until timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'release_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_token uuid;
BEGIN
  IF release_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF release_lease.leased_until IN ('infinity', '-infinity') THEN
    PERFORM outbox._invalid(fn, 'leased_until must be a finite time (NULL: whatever lease the row has)');
  END IF;
  IF release_lease.leased_until IS NOT NULL THEN
    -- The token of that lease: _release_row then ends it only if it is still the row's.
    EXECUTE pg_catalog.format(
      'SELECT t.lease_token FROM %s t WHERE t.id = $1 AND t.leased_until = $2 AND t.sent_at IS NULL',
      v_q.table_oid::regclass)
      INTO v_token USING release_lease.id, release_lease.leased_until;
    IF v_token IS NULL THEN
      RETURN false;
    END IF;
  END IF;
  RETURN outbox._release_row(v_q, release_lease.id, v_token);
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
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'requeue_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
  v_old bigint[];
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
  v_new bigint[];
BEGIN
  PERFORM outbox._check_one_dimension(fn, 'ids', pg_catalog.array_ndims(ids));
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
  -- An id GENERATED ALWAYS takes only DEFAULT: the rows are reset here with their ids, then given
  -- new ones from the identity in their order (outbox._ids_by_default).
  IF outbox._id_generated_always(v_q.table_oid) THEN
    EXECUTE pg_catalog.format(
      'WITH upd AS (
         UPDATE %1$s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                           lease_token = NULL, event_id = %2$s
         WHERE t.id = ANY ($1) AND t.sent_at IS NULL AND t.attempt_count >= $2
         RETURNING t.id)
       SELECT pg_catalog.array_agg(upd.id ORDER BY upd.id) FROM upd',
      v_q.table_oid::regclass, outbox._event_id_of(v_q))
      INTO v_old USING v_old, v_q.max_attempts;
    v_new := outbox._ids_by_default(v_q.table_oid, v_old);
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
              COALESCE(pg_catalog.sum(n), 0)
       FROM (SELECT t.%2$I::text AS k, pg_catalog.min(t.id) AS lo, pg_catalog.max(t.id) AS hi, pg_catalog.count(*) AS n
             FROM %1$s t WHERE t.id = ANY ($1) GROUP BY 1) s',
      v_q.table_oid::regclass, v_q.partition_column)
      INTO v_keys, v_mins, v_maxs, v_count USING v_new;
  ELSE
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
  END IF;
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
-- Retention: deletes at most max_rows rows sent more than older_than ago, oldest ids first, in one
-- short statement (SKIP LOCKED, so it never waits for a drainer). Call it repeatedly until it
-- returns 0; each call is its own small transaction when called outside one.
CREATE OR REPLACE FUNCTION outbox.purge_sent(queue text, older_than interval DEFAULT '7 days', max_rows integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
-- The poisoned rows of a queue for an operator's page: newest first, at most max_rows (1..1000),
-- below before_id when given (the next page). Read through the claim index (attempt_count at
-- max_attempts among unsent rows), so a page never walks the pending backlog. Ordered by id alone:
-- poisoned rows need not share one attempt_count (a max_attempts lowered since leaves rows above
-- it), and ordered by (attempt_count, id) a page below before_id skipped the rows of a smaller
-- count that came after it. The ids first (from the index), then their rows. payload_preview (the
-- payload's first 200 characters) only for a caller whose login role may read the queue table's
-- payload column; NULL otherwise (operators are not granted payloads, docs/security.md).
-- The ids come from one backward scan of the claim index per attempt count present among poisoned
-- rows (found by skipping from one count to the next: usually one), merged: "ORDER BY id DESC"
-- over them all let the planner walk the primary key backwards through every sent row newer than
-- the poisoned ones (1.2-3 s a page with 300,000 poisoned rows under 1.5M sent ones). A payload
-- that may be large is not read for its preview (its stored size is said instead): one stored in
-- more than 64 kB, or compressed into more than 4 kB (a compressed 39 kB held 10 MB of text):
-- turning a 10 MB payload into text to keep 200 characters cost 0.1-0.4 s a row, and a page of
-- them timed out.
CREATE OR REPLACE FUNCTION outbox.poisoned_rows(queue text, max_rows integer DEFAULT 50, before_id bigint DEFAULT NULL)
RETURNS TABLE(id bigint, event_id uuid, event_type text, partition_key text, attempt_count integer,
              last_error text, created_at timestamptz, payload_preview text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
    'WITH RECURSIVE counts(c) AS (
       (SELECT p.attempt_count FROM %3$s p WHERE p.sent_at IS NULL AND p.attempt_count >= $1
        ORDER BY p.attempt_count LIMIT 1)
       UNION ALL
       SELECT (SELECT p.attempt_count FROM %3$s p WHERE p.sent_at IS NULL AND p.attempt_count > counts.c
               ORDER BY p.attempt_count LIMIT 1)
       FROM counts WHERE counts.c IS NOT NULL)
     SELECT t.id, %1$s, t.event_type, %2$s, t.attempt_count, t.last_error, t.created_at,
            CASE WHEN NOT $4 THEN NULL
                 WHEN pg_catalog.pg_column_size(t.payload) > 65536
                   OR pg_catalog.pg_column_compression(t.payload) IS NOT NULL AND pg_catalog.pg_column_size(t.payload) > 4096
                 THEN pg_catalog.format(''(a payload of %%s bytes stored: not shown)'', pg_catalog.pg_column_size(t.payload))
                 ELSE pg_catalog.left(t.payload::text, 200) END
     FROM %3$s t
     WHERE t.id = ANY (ARRAY(
       SELECT x.id FROM counts
       CROSS JOIN LATERAL (SELECT p.id FROM %3$s p
                           -- A range, not =: with an equality the order by id alone let the
                           -- planner walk the primary key backwards through the sent rows again.
                           WHERE p.sent_at IS NULL AND p.attempt_count >= counts.c AND p.attempt_count <= counts.c
                             AND ($2::bigint IS NULL OR p.id < $2)
                           ORDER BY p.attempt_count DESC, p.id DESC LIMIT $3) x
       WHERE counts.c IS NOT NULL
       ORDER BY x.id DESC LIMIT $3))
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
       WHERE keys.k IS NOT NULL AND NOT n.noted AND keys.k::text <> ALL ($4)) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_now, v_noted
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
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
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
  SELECT '0.1.0'::text, 53;
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
-- Operator: ends the lease of a stuck row now (a worker that hangs without dying holds it until
-- leased_until): lease and token cleared together, no attempt counted, claimable at once. The
-- holder's late result is then refused by the token, like any result after a lease ran out.
-- false (nothing changed) when the row is not leased (or is sent).
-- leased_until, when given, fences the call to the lease the operator saw: it ends only a lease
-- that ends exactly then. Without it, a lease that ran out and was taken by a healthy worker
-- between the page and the click was ended instead, and the row delivered twice at once (the
-- console passes the lease end its page showed, alr 00046).
CREATE OR REPLACE FUNCTION outbox.release_lease(queue text, id bigint, leased_until timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'release_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_token uuid;
BEGIN
  IF release_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF release_lease.leased_until IN ('infinity', '-infinity') THEN
    PERFORM outbox._invalid(fn, 'leased_until must be a finite time (NULL: whatever lease the row has)');
  END IF;
  IF release_lease.leased_until IS NOT NULL THEN
    -- The token of that lease: _release_row then ends it only if it is still the row's.
    EXECUTE pg_catalog.format(
      'SELECT t.lease_token FROM %s t WHERE t.id = $1 AND t.leased_until = $2 AND t.sent_at IS NULL',
      v_q.table_oid::regclass)
      INTO v_token USING release_lease.id, release_lease.leased_until;
    IF v_token IS NULL THEN
      RETURN false;
    END IF;
  END IF;
  RETURN outbox._release_row(v_q, release_lease.id, v_token);
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
  v_new bigint[];
BEGIN
  PERFORM outbox._check_one_dimension(fn, 'ids', pg_catalog.array_ndims(ids));
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
  -- An id GENERATED ALWAYS takes only DEFAULT: the rows are reset here with their ids, then given
  -- new ones from the identity in their order (outbox._ids_by_default).
  IF outbox._id_generated_always(v_q.table_oid) THEN
    EXECUTE pg_catalog.format(
      'WITH upd AS (
         UPDATE %1$s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                           lease_token = NULL, event_id = %2$s
         WHERE t.id = ANY ($1) AND t.sent_at IS NULL AND t.attempt_count >= $2
         RETURNING t.id)
       SELECT pg_catalog.array_agg(upd.id ORDER BY upd.id) FROM upd',
      v_q.table_oid::regclass, outbox._event_id_of(v_q))
      INTO v_old USING v_old, v_q.max_attempts;
    v_new := outbox._ids_by_default(v_q.table_oid, v_old);
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
              COALESCE(pg_catalog.sum(n), 0)
       FROM (SELECT t.%2$I::text AS k, pg_catalog.min(t.id) AS lo, pg_catalog.max(t.id) AS hi, pg_catalog.count(*) AS n
             FROM %1$s t WHERE t.id = ANY ($1) GROUP BY 1) s',
      v_q.table_oid::regclass, v_q.partition_column)
      INTO v_keys, v_mins, v_maxs, v_count USING v_new;
  ELSE
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
  END IF;
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
-- The poisoned rows of a queue for an operator's page: newest first, at most max_rows (1..1000),
-- below before_id when given (the next page). Read through the claim index (attempt_count at
-- max_attempts among unsent rows), so a page never walks the pending backlog. Ordered by id alone:
-- poisoned rows need not share one attempt_count (a max_attempts lowered since leaves rows above
-- it), and ordered by (attempt_count, id) a page below before_id skipped the rows of a smaller
-- count that came after it. The ids first (from the index), then their rows. payload_preview (the
-- payload's first 200 characters) only for a caller whose login role may read the queue table's
-- payload column; NULL otherwise (operators are not granted payloads, docs/security.md).
-- The ids come from one backward scan of the claim index per attempt count present among poisoned
-- rows (found by skipping from one count to the next: usually one), merged: "ORDER BY id DESC"
-- over them all let the planner walk the primary key backwards through every sent row newer than
-- the poisoned ones (1.2-3 s a page with 300,000 poisoned rows under 1.5M sent ones). A payload
-- that may be large is not read for its preview (its stored size is said instead): one stored in
-- more than 64 kB, or compressed into more than 4 kB (a compressed 39 kB held 10 MB of text):
-- turning a 10 MB payload into text to keep 200 characters cost 0.1-0.4 s a row, and a page of
-- them timed out.
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
    'WITH RECURSIVE counts(c) AS (
       (SELECT p.attempt_count FROM %3$s p WHERE p.sent_at IS NULL AND p.attempt_count >= $1
        ORDER BY p.attempt_count LIMIT 1)
       UNION ALL
       SELECT (SELECT p.attempt_count FROM %3$s p WHERE p.sent_at IS NULL AND p.attempt_count > counts.c
               ORDER BY p.attempt_count LIMIT 1)
       FROM counts WHERE counts.c IS NOT NULL)
     SELECT t.id, %1$s, t.event_type, %2$s, t.attempt_count, t.last_error, t.created_at,
            CASE WHEN NOT $4 THEN NULL
                 WHEN pg_catalog.pg_column_size(t.payload) > 65536
                   OR pg_catalog.pg_column_compression(t.payload) IS NOT NULL AND pg_catalog.pg_column_size(t.payload) > 4096
                 THEN pg_catalog.format(''(a payload of %%s bytes stored: not shown)'', pg_catalog.pg_column_size(t.payload))
                 ELSE pg_catalog.left(t.payload::text, 200) END
     FROM %3$s t
     WHERE t.id = ANY (ARRAY(
       SELECT x.id FROM counts
       CROSS JOIN LATERAL (SELECT p.id FROM %3$s p
                           -- A range, not =: with an equality the order by id alone let the
                           -- planner walk the primary key backwards through the sent rows again.
                           WHERE p.sent_at IS NULL AND p.attempt_count >= counts.c AND p.attempt_count <= counts.c
                             AND ($2::bigint IS NULL OR p.id < $2)
                           ORDER BY p.attempt_count DESC, p.id DESC LIMIT $3) x
       WHERE counts.c IS NOT NULL
       ORDER BY x.id DESC LIMIT $3))
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
       WHERE keys.k IS NOT NULL AND NOT n.noted AND keys.k::text <> ALL ($4)) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_now, v_noted
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
  SELECT '0.1.0'::text, 52;
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
