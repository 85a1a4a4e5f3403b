-- Statement-level AFTER INSERT trigger of a partitioned queue. It takes the partitions' advisory
-- locks SHARED until this transaction ends (producers never block each other, and no claim deletes
-- a head or raises a floor over rows that are not committed yet), then notes the statement's keys,
-- with the smallest and largest new id of each, for this transaction's commit step
-- (outbox.tg_queue__commit, queued here once per transaction), which orders them, renumbers late
-- rows and creates missing heads.
-- Nothing is written here: a producer never waits on another producer's uncommitted head.
-- The partition lock: advisory lock (1885823232 + queue_id, hashtext(key) & 1023), i.e. 1024 slots
-- per queue, so a 10,000-key insert takes at most 1024 locks and the lock table does not overflow.
-- Arguments: queue_id, partition column.
CREATE OR REPLACE FUNCTION outbox.tg_queue__heads()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_queue_id integer := TG_ARGV[0]::integer;
  v_setting constant text := 'pgdrain.commit_' || TG_RELID;
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
  v_queues text;
BEGIN
  -- Rows that become claimable do so at commit, where the commit step sends the NOTIFY.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || TG_RELID, 'on', true);
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k),
            pg_catalog.array_agg(hi ORDER BY k)
       FROM (SELECT %I::text AS k, pg_catalog.min(id) AS lo, pg_catalog.max(id) AS hi
               FROM pgdrain_new_rows WHERE sent_at IS NULL GROUP BY 1) s', TG_ARGV[1])
    INTO v_keys, v_mins, v_maxs;
  IF v_keys IS NULL THEN
    RETURN NULL;
  END IF;

  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + v_queue_id, s.slot)
  FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 1023 AS slot
        FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;

  -- Merge with the keys of this transaction's earlier statements. The settings are transaction
  -- local, so a rolled back savepoint takes its keys with it, like its rows.
  IF pg_catalog.current_setting(v_setting || '_keys', true) <> '' THEN
    SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k),
           pg_catalog.array_agg(hi ORDER BY k)
      INTO v_keys, v_mins, v_maxs
    FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
          FROM (SELECT * FROM unnest(v_keys, v_mins, v_maxs)
                UNION ALL
                SELECT * FROM unnest(
                  pg_catalog.current_setting(v_setting || '_keys')::text[],
                  pg_catalog.current_setting(v_setting || '_mins')::bigint[],
                  pg_catalog.current_setting(v_setting || '_maxs')::bigint[])) AS u(k, lo, hi)
          GROUP BY u.k) s;
  END IF;
  PERFORM pg_catalog.set_config(v_setting || '_keys', v_keys::text, true),
          pg_catalog.set_config(v_setting || '_mins', v_mins::text, true),
          pg_catalog.set_config(v_setting || '_maxs', v_maxs::text, true);

  v_queues := COALESCE(NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), ''), '{}');
  IF NOT TG_RELID::text = ANY (v_queues::text[]) THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_queues',
                                  (v_queues::text[] || TG_RELID::text)::text, true);
  END IF;
  -- The first statement of the transaction queues the commit step: a row in outbox.commit_hooks,
  -- whose deferred constraint trigger fires at COMMIT. The pending trigger event is on that table,
  -- not on the queue table, so DDL and TRUNCATE of the queue in the same transaction still work.
  IF pg_catalog.current_setting('pgdrain.commit_armed', true) IS DISTINCT FROM 'on' THEN
    INSERT INTO outbox.commit_hooks DEFAULT VALUES;
    PERFORM pg_catalog.set_config('pgdrain.commit_armed', 'on', true);
  END IF;
  RETURN NULL;
END;
$$;
