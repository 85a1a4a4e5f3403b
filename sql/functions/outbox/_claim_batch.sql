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

