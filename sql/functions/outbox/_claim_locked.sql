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

