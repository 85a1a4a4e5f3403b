-- Drops every queue's kept statements (the functions outbox._prepared makes, _q<queue_id>_<hash>)
-- and returns how many: each is made again by the first call that needs it. A kept statement is
-- named for its text, so one a migration changed is never called again but stays until drop_queue;
-- a migration that changes statements calls this in its after-step. A claim that looked one up
-- just before it was dropped fails once ("function does not exist") and is retried by its drainer.
CREATE OR REPLACE FUNCTION outbox._forget_kept_statements()
RETURNS integer
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT outbox._drop_functions('^_q[0-9]+_[0-9a-f]{24}$');
$$;
