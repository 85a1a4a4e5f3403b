-- Statement-level AFTER INSERT trigger: one NOTIFY per statement (PostgreSQL folds identical
-- notifications of one transaction into one), never one per row. On a partitioned queue it stays
-- quiet when the statement only added rows behind existing partition heads (pgdrain_heads fires
-- first and says so): those rows become claimable when their head is done, and the drainer that
-- finishes the head claims again at once. NOTIFY takes a cluster-wide lock at commit, so skipping
-- it is what keeps many concurrent producers of busy keys from queueing behind each other.
-- Arguments: channel, queue name (the payload).
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
AS $$
BEGIN
  IF pg_catalog.current_setting('pgdrain.quiet_' || TG_RELID, true) = 'on' THEN
    RETURN NULL;
  END IF;
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
END;
$$;
