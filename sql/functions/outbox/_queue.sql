-- The registry row of a queue, or SQLSTATE 42P01 naming the queue when it is not registered.
CREATE OR REPLACE FUNCTION outbox._queue(p_function text, p_queue text)
RETURNS outbox.queues
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_name text := outbox._queue_name(p_function, p_queue);
  v_row outbox.queues;
BEGIN
  SELECT * INTO v_row FROM outbox.queues q WHERE q.queue = v_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', p_function, v_name
      USING ERRCODE = '42P01';
  END IF;
  RETURN v_row;
END;
$$;
