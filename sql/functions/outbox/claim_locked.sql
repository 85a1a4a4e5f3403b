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
