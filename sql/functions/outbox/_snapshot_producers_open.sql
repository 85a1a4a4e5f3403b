-- Whether a REPEATABLE READ or SERIALIZABLE transaction may be writing rows of the queue (it holds
-- the shared lock of outbox.tg_queue__snapshot_producer): a READ COMMITTED commit step then raises
-- its keys' clocks, which such a transaction reads to know it is late. Otherwise it only locks them:
-- a clock written on every commit piles up a version per commit of its key while any session holds
-- back the xmin horizon, and every later commit of the key walks them (issue 29).
-- A try of the exclusive lock, let go at once: another READ COMMITTED commit step trying at the same
-- instant makes it answer true, which only costs a clock write. Taken and let go of in one
-- expression: PL/pgSQL handles a cancel (or a statement_timeout) between two statements, and one
-- landing between the lock and the unlock left the session holding it, a REPEATABLE READ producer
-- of the queue then waiting for it until that connection closed.
-- Why no such transaction can miss a lock-only commit: docs/ordering.md.
CREATE OR REPLACE FUNCTION outbox._snapshot_producers_open(p_queue_id integer)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_class constant integer := outbox._snapshot_lock_class();
BEGIN
  RETURN NOT (pg_catalog.pg_try_advisory_lock(v_class, p_queue_id)
              AND pg_catalog.pg_advisory_unlock(v_class, p_queue_id));
END;
$$;
