-- Notes rows this transaction wrote to a partitioned queue (a producer's INSERT, through
-- tg_queue__heads, or requeue_poisoned moving rows to the tail of their keys) for its commit step.
-- It takes the partitions' advisory locks SHARED until the transaction ends (producers never block
-- each other, and no claim deletes a head or raises a floor over rows that are not committed yet),
-- merges the keys with the smallest and largest id of each into transaction-local settings (a rolled
-- back savepoint takes its keys with it, like its rows), and, once per transaction, queues the
-- commit step (outbox.tg_queue__commit) by inserting a row into outbox.commit_hooks.
-- The partition lock: advisory lock (1885823232 + queue_id, hashtext(key) & 1023), i.e. 1024 slots
-- per queue, so a 10,000-key insert takes at most 1024 locks and the lock table does not overflow.
CREATE OR REPLACE FUNCTION outbox._note_written(p_queue_id integer, p_table oid, p_keys text[], p_mins bigint[],
                                                p_maxs bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_setting constant text := 'pgdrain.commit_' || p_table;
  v_keys text[] := p_keys;
  v_mins bigint[] := p_mins;
  v_maxs bigint[] := p_maxs;
  v_queues text;
BEGIN
  -- Rows that become claimable do so at commit, where the commit step sends the NOTIFY.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || p_table, 'on', true);
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_queue_id, s.slot)
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
  IF NOT p_table::text = ANY (v_queues::text[]) THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_queues',
                                  (v_queues::text[] || p_table::text)::text, true);
  END IF;
  -- The first statement of the transaction queues the commit step: a row in outbox.commit_hooks,
  -- whose deferred constraint trigger fires at COMMIT. The pending trigger event is on that table,
  -- not on the queue table, so DDL and TRUNCATE of the queue in the same transaction still work.
  -- Armed before the insert: under SET CONSTRAINTS ... IMMEDIATE the hook's trigger fires at the end
  -- of that INSERT, runs the commit step for what is noted so far and disarms, so the next statement
  -- queues it again.
  IF pg_catalog.current_setting('pgdrain.commit_armed', true) IS DISTINCT FROM 'on' THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_armed', 'on', true);
    INSERT INTO outbox.commit_hooks DEFAULT VALUES;
  END IF;
END;
$$;
