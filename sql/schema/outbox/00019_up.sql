-- Producers' commit step in fewer statements (issue 14).
-- The commit step takes a hash's commit lock and raises its clock in one statement, keeping the
-- clock it found (outbox._commit_partitions): NULL until the first commit step after this migration.
ALTER TABLE outbox.partition_clocks ADD COLUMN previous_max bigint;
COMMENT ON COLUMN outbox.partition_clocks.previous_max IS
  'The clock as the last commit step of this hash found it, before raising it (internal).';

-- A transaction's notes for its commit step move from transaction-local settings (six of them,
-- read and written on every statement; a producer could set them) into its row of
-- outbox.commit_hooks per table, which only the definer's triggers write. The table is empty when
-- no producer is open; DROP waits for those that are.
DROP FUNCTION outbox._commit_partitions(outbox.queues);
DROP FUNCTION outbox._noted_keys(outbox.queues, boolean);
DROP FUNCTION outbox._note_written(oid, text[], bigint[], bigint[]);
DROP TABLE outbox.commit_hooks;
CREATE UNLOGGED TABLE outbox.commit_hooks (
  xid xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
  table_oid oid NOT NULL,
  -- Each noted row's key and id (aligned, in the order noted); NULL once they would pass 1,024
  -- entries, and from then on the span of ids, lo..hi, is all there is.
  keys text[],
  ids bigint[],
  lo bigint NOT NULL,
  hi bigint NOT NULL,
  PRIMARY KEY (xid, table_oid)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
COMMENT ON TABLE outbox.commit_hooks IS
  'Producers'' open transactions: what each wrote to a partitioned queue, for its commit step (internal; empty when idle).';
