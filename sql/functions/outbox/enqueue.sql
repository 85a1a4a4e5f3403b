-- Convenience insert; a plain INSERT into the queue table is equally valid (the triggers do the
-- rest). partition_key is required (and must not be empty or blank) on a partitioned queue and
-- refused on an unpartitioned one. The payload must be a JSON value other than null.
CREATE OR REPLACE FUNCTION outbox.enqueue(queue text, event_type text, payload jsonb, partition_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'enqueue';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_id bigint;
BEGIN
  IF enqueue.event_type IS NULL OR pg_catalog.btrim(enqueue.event_type) = '' THEN
    PERFORM outbox._invalid(fn, 'event_type must be a non-empty string');
  END IF;
  IF enqueue.payload IS NULL THEN
    PERFORM outbox._invalid(fn, 'payload must not be NULL (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF pg_catalog.jsonb_typeof(enqueue.payload) = 'null' THEN
    PERFORM outbox._invalid(fn, 'payload must not be JSON null (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF v_q.partition_column IS NULL THEN
    IF enqueue.partition_key IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'partition_key must be NULL: queue %s has no partition column', v_q.queue));
    END IF;
    EXECUTE pg_catalog.format('INSERT INTO %s (event_type, payload) VALUES ($1, $2) RETURNING id',
                              v_q.table_oid::regclass)
      INTO v_id USING enqueue.event_type, enqueue.payload;
  ELSE
    IF enqueue.partition_key IS NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'partition_key must not be NULL: queue %s is partitioned by %s', v_q.queue, v_q.partition_column));
    END IF;
    IF pg_catalog.btrim(enqueue.partition_key) = '' THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'partition_key must be a non-empty string, got %s', pg_catalog.quote_literal(enqueue.partition_key)));
    END IF;
    EXECUTE pg_catalog.format('INSERT INTO %s (event_type, payload, %I) VALUES ($1, $2, $3::%s) RETURNING id',
                              v_q.table_oid::regclass, v_q.partition_column, v_q.partition_type)
      INTO v_id USING enqueue.event_type, enqueue.payload, enqueue.partition_key;
  END IF;
  RETURN v_id;
END;
$$;
