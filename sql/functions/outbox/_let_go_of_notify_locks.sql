-- Lets go of the session locks of a queue's NOTIFY marks (the notify gate, key -4, and the
-- drainers' mark lock, key -5) that this session still holds: outbox.drainer_waits and
-- outbox.drainer_woke take them for the length of the call, and a cancel (or statement_timeout)
-- that PL/pgSQL handles between the statement that takes one and the one that lets go of it leaves
-- it held on the connection (a pool's, or PgBouncer's server connection). Both call this first, so
-- a lock left so lasts until that session's next call; meanwhile producers notify (a gate they can
-- not take answers true, outbox._drainer_waits) and other drainers' marks answer NULL.
CREATE OR REPLACE FUNCTION outbox._let_go_of_notify_locks(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_key integer;
BEGIN
  -- A session lock taken n times is held until let go of n times (pg_locks shows it once); an
  -- unlock of a lock not held warns the caller, so each is asked before.
  FOR v_key IN SELECT k FROM pg_catalog.unnest(ARRAY[-5, -4]) AS k LOOP
    FOR i IN 1..1000 LOOP
      EXIT WHEN NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_locks l
        WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.objsubid = 2
          AND l.mode = 'ExclusiveLock'
          AND l.classid = (1885823232 + p_queue_id)::oid AND l.objid = (v_key::bigint & 4294967295)::oid);
      PERFORM pg_catalog.pg_advisory_unlock(1885823232 + p_queue_id, v_key);
    END LOOP;
  END LOOP;
END;
$$;
