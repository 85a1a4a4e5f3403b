-- The advisory lock that stands for a partition (hashed into 1024 slots per queue): producers hold
-- it shared from their insert trigger until they commit; whoever deletes an empty head or raises a
-- partition's floor first takes it exclusively (try, never wait). So a head is never deleted, and
-- a floor never raised, over a producer's uncommitted rows. Slots, not keys: a 10,000-key insert
-- takes at most 1024 locks, and the lock table does not overflow.
CREATE OR REPLACE FUNCTION outbox._partition_lock(p_queue_id integer, p_key text)
RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = ''
AS $$
  SELECT (pg_catalog.int8(1885823232 + p_queue_id) << 32) | (pg_catalog.hashtext(p_key) & 1023);
$$;
