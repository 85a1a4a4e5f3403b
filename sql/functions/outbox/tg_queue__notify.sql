-- Statement-level AFTER INSERT trigger of an unpartitioned queue: one NOTIFY per statement
-- (PostgreSQL folds identical notifications of one transaction into one), never one per row. A
-- partitioned queue has none: its rows become claimable at commit, and its commit step
-- (outbox._commit_keys) notifies only when it made or woke a partition head; rows behind an
-- existing head are claimed when the drainer that finishes the head claims again. NOTIFY takes a
-- cluster-wide lock at commit, held through the commit's WAL flush, so concurrent producers that
-- notify commit one at a time: a queue that notifies 'when_waiting' (outbox.set_notify) skips it
-- unless a drainer waits for one (the check of outbox._drainer_waits, inlined: no lookup, its
-- arguments name the queue and sequence).
-- Arguments: channel, queue name (the payload); for 'when_waiting' also the queue_id and the name
-- of its drainer_waits_q<queue_id> sequence (a name, so a restored database finds its own; a
-- trigger made before 00025 gives an oid, which reads the same way).
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- Not in a transaction that set pgdrain.notify to 'off' (two-phase commit: see outbox._drainer_waits).
  IF pg_catalog.current_setting('pgdrain.notify', true) = 'off' THEN
    RETURN NULL;
  END IF;
  -- The gate only tried: one a drainer holds (marking itself, or left held by a cancelled call)
  -- notifies, which is never wrong, and never waits.
  IF TG_NARGS > 2 AND pg_catalog.pg_try_advisory_xact_lock_shared(1885823232 + TG_ARGV[2]::integer, -4) THEN
    IF COALESCE(pg_catalog.pg_sequence_last_value(TG_ARGV[3]::regclass), 0)
       <= (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint THEN
      RETURN NULL;
    END IF;
  END IF;
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
END;
$$;
