-- The first key of the advisory lock by which REPEATABLE READ and SERIALIZABLE producers of a queue
-- announce themselves (outbox.tg_queue__snapshot_producer; the second key is the queue_id). An
-- application that takes advisory locks with two integer keys should not use this first key.
CREATE OR REPLACE FUNCTION outbox._snapshot_lock_class()
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN 1885823231;
