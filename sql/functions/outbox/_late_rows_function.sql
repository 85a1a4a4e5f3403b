-- The function that runs outbox._late_rows' statement for a queue, made for the queue and its table
-- as registered and named now: outbox._q<queue_id>_late_<hash of the table and column>, static
-- SQL, so PL/pgSQL keeps its plan for the session. A renamed table or column finds no function of
-- its name and gets one. Made by create_queue (so that producers' commits do not make it) and
-- otherwise by the first commit that needs it, as outbox._prepared makes its functions (the commit
-- step runs as the schema owner, under a try-lock); when it can not be made now (another session is
-- making it, a read-only transaction, DDL refused), the statement itself runs this once.
-- drop_queue drops it with the queue's other functions.
-- p_replace (create_queue, through outbox._install_heads_trigger): the function is made again in
-- place (CREATE OR REPLACE: a producer's commit step running it meanwhile keeps working; dropped
-- and made again, it failed with "cache lookup failed for function"), and the queue's late-rows
-- functions of other names (another table or column, an older seed) are dropped.
-- The function plans its statement once per session (plan_cache_mode = force_generic_plan, with
-- the commit step's own planner settings): left to choose, PostgreSQL planned it again on every
-- call (its range of ids, as constants, looks cheaper than the generic plan's), about 250 µs of
-- each late check beside running drainers (00039; docs/performance.md). The planner settings are
-- pinned here, not taken from the caller, since the one plan is made under whatever is set then.
-- Returns the statement to EXECUTE with $1..$5 = keys, our smallest id of each, our transaction's
-- full id, our smallest id, the last id given out.
CREATE OR REPLACE FUNCTION outbox._late_rows_function(p_q outbox.queues, p_replace boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_table constant text := p_q.table_oid::regclass::text;
  -- 'pinned|': a function made before they pinned search_path = pg_catalog, pg_temp (00030; a
  -- producer's commit could still make one while that migration ran) is not reused.
  v_name constant text := '_q' || p_q.queue_id || '_late_' || pg_catalog.left(
    pg_catalog.md5('pinned|' || v_table || '|' || p_q.partition_column), 16);
  v_sql text;
BEGIN
  IF NOT p_replace AND pg_catalog.to_regproc('outbox.' || v_name) IS NOT NULL THEN
    RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
  END IF;
  IF p_replace THEN
    PERFORM outbox._drop_functions('^_q' || p_q.queue_id || '_late_(?!' || pg_catalog.substr(v_name, pg_catalog.length(v_name) - 15) || '$)');
  END IF;
  -- One pass over the range, whatever the number of keys: a key's membership is a lookup in a
  -- jsonb object of our keys, and the answer per key another (no join: this runs under the commit
  -- step's planner settings, and a nested loop over thousands of keys would be quadratic). A
  -- visible row whose xmin is in progress is ours (a savepoint's): its full xid, widened from 32
  -- bits against ours ($3), as outbox._written_here does.
  v_sql := pg_catalog.format(
    'SELECT pg_catalog.array_agg(CASE WHEN (m.j ->> u.k)::bigint > u.lo THEN (m.j ->> u.k)::bigint END ORDER BY u.n)
     FROM (SELECT pg_catalog.jsonb_object_agg(r.k, r.hi) AS j
           FROM (SELECT t.%2$I::text AS k, pg_catalog.max(t.id) AS hi
                 FROM %1$s t
                 WHERE t.id > $4 AND t.id <= $5
                   AND (SELECT pg_catalog.jsonb_object_agg(x.k, true) FROM unnest($1::text[]) AS x(k)) ? t.%2$I::text
                   AND t.xmin::text::bigint <> $3 %% 4294967296
                   AND pg_catalog.pg_xact_status(($3 + ((t.xmin::text::bigint - ($3 %% 4294967296) + 6442450944) %% 4294967296
                                                       - 2147483648))::text::xid8) <> ''in progress''
                 GROUP BY 1) r) m
     CROSS JOIN unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(k, lo, n)',
    v_table, p_q.partition_column);
  IF pg_catalog.current_setting('transaction_read_only') = 'off'
     AND (p_replace OR pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name))) THEN
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) RETURNS bigint[] LANGUAGE plpgsql STABLE
         SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
         SET enable_bitmapscan = off SET jit = off AS %L', v_name, 'BEGIN RETURN (' || v_sql || '); END');
      EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) FROM PUBLIC', v_name);
      EXECUTE pg_catalog.format('COMMENT ON FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) IS %L', v_name,
        'pgdrain: the late-rows statement of queue ' || p_q.queue_id || ' (outbox._late_rows; internal)');
      RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
  END IF;
  RETURN v_sql;
END;
$$;
