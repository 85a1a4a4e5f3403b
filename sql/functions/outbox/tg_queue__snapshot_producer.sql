-- pgdrain_snapshot (outbox._install_heads_trigger): a REPEATABLE READ or SERIALIZABLE transaction
-- about to write rows of a partitioned queue announces itself before it
-- takes an id, with a shared transaction-level advisory lock held until it ends. Such a transaction
-- reads the key clocks in its snapshot at COMMIT and can not see later commits in the queue table;
-- a READ COMMITTED commit step that finds the lock taken raises the clocks of its keys for it
-- (outbox._snapshot_producers_open). Shared: these transactions never wait for each other; the
-- lock is taken once per statement (a lock this transaction holds costs a lookup). Its keys are
-- the trigger's arguments: outbox._snapshot_lock_class() and the queue_id, so that a producer needs
-- no privilege to run it.
CREATE OR REPLACE FUNCTION outbox.tg_queue__snapshot_producer()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(TG_ARGV[0]::integer, TG_ARGV[1]::integer);
  RETURN NULL;
END;
$$;
