-- Notes rows this transaction wrote to a partitioned queue (a producer's INSERT, through its
-- generated heads trigger, or requeue_poisoned moving rows to the tail of their keys) for its
-- commit step: appends the keys with the smallest and largest id of each to transaction-local
-- settings (a rolled back savepoint takes its keys with it, like its rows) and, once per
-- transaction, queues the commit step (outbox.tg_queue__commit) by inserting a row into
-- outbox.commit_hooks. It takes no lock: a producer's INSERT never waits, and what protects its
-- uncommitted rows from a claim that finds their partition empty is the commit step's (see
-- outbox._commit_partitions and outbox._refresh_heads).
-- The settings are only appended to (text, no parsing): a transaction of many statements costs the
-- same per statement whatever it wrote before; the commit step merges repeated keys once.
CREATE OR REPLACE FUNCTION outbox._note_written(p_table oid, p_keys text[], p_mins bigint[], p_maxs bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_setting constant text := 'pgdrain.commit_' || p_table;
  v_keys constant text := pg_catalog.current_setting(v_setting || '_keys', true);
  v_queues text;
  v_span text;
BEGIN
  -- Rows that become claimable do so at commit, where the commit step sends the NOTIFY.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || p_table, 'on', true);

  -- Array literals are appended as text: '{a,b}' and '{c}' make '{a,b,c}'. Past 8 kB of keys (a
  -- transaction of many statements) only the span of ids is kept, "lo,hi", so a statement costs the
  -- same however many came before; the commit step then reads the keys from those rows.
  v_span := NULLIF(pg_catalog.current_setting(v_setting || '_span', true), '');
  IF v_span IS NULL AND pg_catalog.length(v_keys) > 8192 THEN
    SELECT pg_catalog.min(lo) || ',' || pg_catalog.max(hi) INTO v_span
    FROM unnest(pg_catalog.current_setting(v_setting || '_mins')::bigint[],
                pg_catalog.current_setting(v_setting || '_maxs')::bigint[]) AS u(lo, hi);
    PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
            pg_catalog.set_config(v_setting || '_mins', '', true),
            pg_catalog.set_config(v_setting || '_maxs', '', true);
  END IF;
  IF v_span IS NOT NULL THEN
    PERFORM pg_catalog.set_config(v_setting || '_span',
      LEAST(pg_catalog.split_part(v_span, ',', 1)::bigint, (SELECT pg_catalog.min(x) FROM pg_catalog.unnest(p_mins) x))
      || ',' ||
      GREATEST(pg_catalog.split_part(v_span, ',', 2)::bigint, (SELECT pg_catalog.max(x) FROM pg_catalog.unnest(p_maxs) x)),
      true);
  ELSIF v_keys IS NULL OR v_keys = '' THEN
    PERFORM pg_catalog.set_config(v_setting || '_keys', p_keys::text, true),
            pg_catalog.set_config(v_setting || '_mins', p_mins::text, true),
            pg_catalog.set_config(v_setting || '_maxs', p_maxs::text, true);
  ELSE
    PERFORM pg_catalog.set_config(v_setting || '_keys',
              pg_catalog.rtrim(v_keys, '}') || ',' || pg_catalog.ltrim(p_keys::text, '{'), true),
            pg_catalog.set_config(v_setting || '_mins',
              pg_catalog.rtrim(pg_catalog.current_setting(v_setting || '_mins'), '}') || ','
              || pg_catalog.ltrim(p_mins::text, '{'), true),
            pg_catalog.set_config(v_setting || '_maxs',
              pg_catalog.rtrim(pg_catalog.current_setting(v_setting || '_maxs'), '}') || ','
              || pg_catalog.ltrim(p_maxs::text, '{'), true);
  END IF;

  -- The first statement of the transaction queues the commit step: a row in outbox.commit_hooks,
  -- whose deferred constraint trigger fires at COMMIT. The pending trigger event is on that table,
  -- not on the queue table, so DDL and TRUNCATE of the queue in the same transaction still work.
  -- Armed before the insert: under SET CONSTRAINTS ... IMMEDIATE the hook's trigger fires at the end
  -- of that INSERT, runs the commit step for what is noted so far and disarms, so the next statement
  -- queues it again.
  IF pg_catalog.current_setting('pgdrain.commit_armed', true) IS DISTINCT FROM 'on' THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_armed', 'on', true);
    v_queues := COALESCE(NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), ''), '{}');
    IF NOT p_table::text = ANY (v_queues::text[]) THEN
      PERFORM pg_catalog.set_config('pgdrain.commit_queues', (v_queues::text[] || p_table::text)::text, true);
    END IF;
    INSERT INTO outbox.commit_hooks DEFAULT VALUES;
  ELSIF pg_catalog.strpos(pg_catalog.current_setting('pgdrain.commit_queues', true), p_table::text) = 0
     OR NOT p_table::text = ANY (pg_catalog.current_setting('pgdrain.commit_queues')::text[]) THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_queues',
      (pg_catalog.current_setting('pgdrain.commit_queues')::text[] || p_table::text)::text, true);
  END IF;
END;
$$;
