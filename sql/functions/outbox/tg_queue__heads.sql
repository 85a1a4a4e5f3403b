-- Statement-level AFTER INSERT trigger of a partitioned queue: makes sure every key written by the
-- statement has a row in outbox.partition_heads, so claims never walk blocked successors.
-- It first takes the partitions' advisory locks SHARED (see below) until this
-- transaction ends: producers never block each other, and nobody deletes a head or raises a floor
-- over rows that are not committed yet. No tuple is written for a key that already has a head.
-- The partition lock: advisory lock (1885823232 + queue_id, hashtext(key) & 1023), i.e. 1024 slots
-- per queue, so a 10,000-key insert takes at most 1024 locks and the lock table does not overflow.
-- Arguments: queue_id, partition column.
CREATE OR REPLACE FUNCTION outbox.tg_queue__heads()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_queue_id integer := TG_ARGV[0]::integer;
  v_keys text[];
  v_ids bigint[];
  v_new_keys text[];
  v_new_ids bigint[];
  v_low_keys text[];
  v_low_ids bigint[];
  v_low record;
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(min_id ORDER BY k)
       FROM (SELECT %I::text AS k, pg_catalog.min(id) AS min_id
               FROM pgdrain_new_rows WHERE sent_at IS NULL GROUP BY 1) s', TG_ARGV[1])
    INTO v_keys, v_ids;
  IF v_keys IS NULL THEN
    PERFORM pg_catalog.set_config('pgdrain.quiet_' || TG_RELID, 'on', true);
    RETURN NULL;
  END IF;

  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + v_queue_id, s.slot)
  FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 1023 AS slot
        FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;

  -- One index probe per key finds the keys with no head yet and the heads whose floor was raised
  -- past our rows (the raiser could not see them yet); both are rare, and only they are written.
  SELECT pg_catalog.array_agg(u.k) FILTER (WHERE h.floor_id IS NULL),
         pg_catalog.array_agg(u.id) FILTER (WHERE h.floor_id IS NULL),
         pg_catalog.array_agg(u.k) FILTER (WHERE h.floor_id > u.id),
         pg_catalog.array_agg(u.id) FILTER (WHERE h.floor_id > u.id)
    INTO v_new_keys, v_new_ids, v_low_keys, v_low_ids
  FROM unnest(v_keys, v_ids) AS u(k, id)
  -- LATERAL: a probe on both key columns per key, whatever the statistics of the heads table say
  -- (a join may scan every head of the queue when they were last analyzed while it was empty).
  LEFT JOIN LATERAL (SELECT x.floor_id FROM outbox.partition_heads x
                     WHERE x.queue_id = v_queue_id AND x.partition_key = u.k) h ON true;

  -- New heads, in key order, never waiting on a committed one (DO NOTHING takes no lock). A key
  -- whose head another producer made meanwhile may carry a floor above our rows: lowered below.
  IF v_new_keys IS NOT NULL THEN
    WITH ins AS (
      INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
      SELECT v_queue_id, u.k, u.id, u.id
      FROM unnest(v_new_keys, v_new_ids) AS u(k, id)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING partition_key)
    SELECT pg_catalog.array_cat(v_low_keys, pg_catalog.array_agg(u.k)),
           pg_catalog.array_cat(v_low_ids, pg_catalog.array_agg(u.id))
      INTO v_low_keys, v_low_ids
    FROM unnest(v_new_keys, v_new_ids) AS u(k, id)
    WHERE u.k NOT IN (SELECT ins.partition_key FROM ins);
  END IF;

  -- Tell pgdrain_notify (fired next) whether this statement made any partition claimable.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || TG_RELID,
                                CASE WHEN v_new_keys IS NULL THEN 'on' ELSE 'off' END, true);

  -- Rows that got their ids before a floor was raised past them (the raiser could not see them
  -- yet): lower the floor so the head search finds them. Rare; one key at a time in key order, so
  -- two producers never lock the same heads in opposite orders.
  IF v_low_keys IS NOT NULL THEN
    FOR v_low IN
      SELECT u.k, pg_catalog.min(u.id) AS id FROM unnest(v_low_keys, v_low_ids) AS u(k, id)
      GROUP BY u.k ORDER BY u.k
    LOOP
      UPDATE outbox.partition_heads h SET floor_id = v_low.id
      WHERE h.queue_id = v_queue_id AND h.partition_key = v_low.k AND h.floor_id > v_low.id;
    END LOOP;
  END IF;
  RETURN NULL;
END;
$$;
