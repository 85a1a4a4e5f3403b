-- The statement to EXECUTE for p_sql, a statement of queue p_queue_id built with format() whose
-- parameters $1..$n have the types p_args (comma-separated, in order): a call of a function whose
-- body is p_sql as static SQL, so its plan is made once per session instead of on every EXECUTE
-- (planning the claim, record and refresh statements cost as much as running them); p_sql itself
-- when no such function can be had. Both take the same parameters, so the caller's USING list
-- serves either. p_returns is the function's result: 'void', or 'TABLE(...)' whose columns the
-- statement's columns match exactly.
--
-- The function forces a generic plan: left to choose, the plan cache kept planning some of these
-- statements again on every call (a claim's read-back: 465 of 716 calls planned, about 50 µs
-- each), because a generic plan of `= ANY ($1)` looks dearer than a custom one for a short array.
--
-- The function is named for what it runs (queue id and a hash of p_args, p_returns and p_sql): a
-- statement that changes (a new migration, a queue registered again with another table or column)
-- finds no function of that name and makes its own, and one that was dropped is made again, so
-- there is no state to drift. It is made by the first call that needs it, as the caller's
-- current user (the schema owner: the callers are SECURITY DEFINER), executable by nobody else,
-- under a try-lock: a session that does not get the lock, may not create functions in outbox, or
-- runs a read-only transaction (a standby) runs p_sql this once.
-- drop_queue drops a queue's functions.
CREATE OR REPLACE FUNCTION outbox._prepared(p_queue_id integer, p_sql text, p_args text, p_returns text)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  -- md5 and to_regproc (a name, no argument types to parse): this runs before every statement.
  -- 'generic pinned|': a function made before they forced generic plans, or before they pinned
  -- search_path = pg_catalog, pg_temp (00030; an older session's call could still make one while
  -- that migration ran), is not reused.
  v_name constant text := '_q' || p_queue_id || '_' || pg_catalog.left(
    pg_catalog.md5('generic pinned|' || p_args || '|' || p_returns || '|' || p_sql), 24);
  v_signature text;
  v_fn regproc := pg_catalog.to_regproc(pg_catalog.format('outbox.%I', v_name));
  v_params text := '';
BEGIN
  FOR n IN 1..pg_catalog.length(p_args) - pg_catalog.length(pg_catalog.replace(p_args, ',', '')) + 1 LOOP
    v_params := v_params || CASE WHEN n > 1 THEN ', $' ELSE '$' END || n;
  END LOOP;
  IF p_args = '' THEN
    v_params := '';
  END IF;
  IF v_fn IS NULL THEN
    IF pg_catalog.current_setting('transaction_read_only') = 'on'
       OR NOT pg_catalog.has_schema_privilege('outbox', 'CREATE')
       OR NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name)) THEN
      RETURN p_sql;
    END IF;
    v_signature := pg_catalog.format('outbox.%I(%s)', v_name, p_args);
    -- Making it must never fail the caller: another session may have made it since the lookup
    -- above (and this session's catalog cache may not know yet), or an event trigger may refuse
    -- DDL. Any of these only means running p_sql this once (the subtransaction is paid only here).
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE FUNCTION outbox.%I(%s) RETURNS %s LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp '
        'SET plan_cache_mode = force_generic_plan AS %L',
        v_name, p_args, p_returns,
        CASE WHEN p_returns = 'void' THEN 'BEGIN ' || p_sql || '; END'
             ELSE 'BEGIN RETURN QUERY ' || p_sql || '; END' END);
      EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', v_signature);
      EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', v_signature,
        'pgdrain: one statement of queue ' || p_queue_id || ' with its plan kept (outbox._prepared; internal)');
    EXCEPTION WHEN OTHERS THEN
      RETURN p_sql;
    END;
    v_fn := pg_catalog.to_regproc(pg_catalog.format('outbox.%I', v_name));
  END IF;
  IF NOT pg_catalog.has_function_privilege(v_fn, 'EXECUTE') THEN
    RETURN p_sql;
  END IF;
  RETURN CASE WHEN p_returns = 'void' THEN pg_catalog.format('SELECT outbox.%I(%s)', v_name, v_params)
              ELSE pg_catalog.format('SELECT * FROM outbox.%I(%s)', v_name, v_params) END;
END;
$$;
