-- Statement-level AFTER INSERT trigger of a partitioned queue: makes sure every key written by the
-- statement has a row in outbox.partition_heads, so claims never walk blocked successors.
-- It first takes the partitions' advisory locks SHARED (outbox._partition_lock) until this
-- transaction ends: producers never block each other, and nobody deletes a head or raises a floor
-- over rows that are not committed yet. No tuple is written for a key that already has a head.
-- Arguments: queue_id, partition column.
CREATE OR REPLACE FUNCTION outbox.tg_queue__heads()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
AS $$
DECLARE
  v_queue_id integer := TG_ARGV[0]::integer;
  v_keys text[];
  v_ids bigint[];
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(min_id ORDER BY k)
       FROM (SELECT %I::text AS k, pg_catalog.min(id) AS min_id
               FROM pgdrain_new_rows WHERE sent_at IS NULL GROUP BY 1) s', TG_ARGV[1])
    INTO v_keys, v_ids;
  IF v_keys IS NULL THEN
    RETURN NULL;
  END IF;

  PERFORM pg_catalog.pg_advisory_xact_lock_shared(l)
  FROM (SELECT DISTINCT outbox._partition_lock(v_queue_id, k) AS l
        FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;

  INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
  SELECT v_queue_id, u.k, u.id, u.id
  FROM unnest(v_keys, v_ids) AS u(k, id)
  ORDER BY u.k
  ON CONFLICT DO NOTHING;

  -- Rows that got their ids before a floor was raised past them (the raiser could not see them
  -- yet): lower the floor so the head search finds them.
  UPDATE outbox.partition_heads h SET floor_id = u.id
  FROM unnest(v_keys, v_ids) AS u(k, id)
  WHERE h.queue_id = v_queue_id AND h.partition_key = u.k AND h.floor_id > u.id;
  RETURN NULL;
END;
$$;
