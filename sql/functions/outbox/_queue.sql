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
