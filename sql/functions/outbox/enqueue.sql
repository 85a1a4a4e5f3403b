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
