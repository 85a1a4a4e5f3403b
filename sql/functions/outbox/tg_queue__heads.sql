-- Statement-level AFTER INSERT trigger of a partitioned queue: makes sure every key written by the
-- statement has a row in outbox.partition_heads, so claims never walk blocked successors.
-- An existing head is held FOR KEY SHARE until this transaction ends: producers never block each
-- other (shared lock, stored in the tuple, so a 10,000-key insert does not fill the lock table),
-- while a claimer that finds the partition empty can not delete the head under an uncommitted row.
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
  v_done text[];
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(min_id ORDER BY k)
       FROM (SELECT %I::text AS k, pg_catalog.min(id) AS min_id
               FROM pgdrain_new_rows WHERE sent_at IS NULL GROUP BY 1) s', TG_ARGV[1])
    INTO v_keys, v_ids;
  WHILE v_keys IS NOT NULL LOOP
    SELECT pg_catalog.array_agg(h.partition_key) INTO v_done
    FROM (SELECT h.partition_key FROM outbox.partition_heads h
          WHERE h.queue_id = v_queue_id AND h.partition_key = ANY (v_keys)
          ORDER BY h.partition_key
          FOR KEY SHARE) h;

    WITH ins AS (
      INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id)
      SELECT v_queue_id, u.k, u.id
      FROM unnest(v_keys, v_ids) AS u(k, id)
      WHERE u.k <> ALL (COALESCE(v_done, '{}'))
      ORDER BY u.k
      ON CONFLICT DO NOTHING
      RETURNING partition_key)
    SELECT pg_catalog.array_cat(v_done, pg_catalog.array_agg(ins.partition_key)) INTO v_done FROM ins;

    -- Keys whose head appeared or vanished between the two statements: go round again.
    SELECT pg_catalog.array_agg(u.k ORDER BY u.k), pg_catalog.array_agg(u.id ORDER BY u.k)
      INTO v_keys, v_ids
    FROM unnest(v_keys, v_ids) AS u(k, id)
    WHERE u.k <> ALL (COALESCE(v_done, '{}'));
  END LOOP;
  RETURN NULL;
END;
$$;
