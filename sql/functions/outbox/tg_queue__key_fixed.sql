-- Row-level AFTER UPDATE OF <partition column> trigger (pgdrain_key_fixed) of every partitioned
-- queue table, made by outbox._install_heads_trigger with a WHEN that lets it fire only for an
-- unsent row whose key changes: the partition key of an event not yet sent is fixed. Its place in
-- its key's order was set when its transaction committed (the key's head, floor and clock know it
-- under its key); moved to another key it had no head until the repair pass, and a row of the new
-- key written after it could be delivered before it. pgdrain's own statements never name the
-- column, so it never fires for them, nor for producers (they insert). A sent row's key may change.
-- Argument: the partition column's name.
CREATE OR REPLACE FUNCTION outbox.tg_queue__key_fixed()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- The queue's table, also when the row is in a partition of a table partitioned by range of id.
  RAISE EXCEPTION 'pgdrain: the partition key (column %) of event % of % can not change while it is not sent',
    TG_ARGV[0], OLD.id, COALESCE(pg_catalog.pg_partition_root(TG_RELID), TG_RELID::regclass)
    USING ERRCODE = '23514',
          HINT = 'Its place in its key''s order was fixed when it committed: write a new event for the other key.';
END;
$$;
