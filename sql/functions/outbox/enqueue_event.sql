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
