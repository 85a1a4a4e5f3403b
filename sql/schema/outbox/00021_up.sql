-- Producers' notes become one row per statement (issue 14). A transaction appended to its one row
-- of outbox.commit_hooks on every statement, and each update walked the versions the earlier ones
-- had left (its own, not removable before it ends): a transaction of n INSERT statements cost
-- O(n²). Notes are now inserted and never updated, into outbox.commit_notes; outbox.commit_hooks
-- keeps one row per transaction again, whose insert (ON CONFLICT DO NOTHING: only the first
-- statement's) queues the commit step.
DROP FUNCTION outbox._commit_partitions(outbox.queues, outbox.commit_hooks);
DROP FUNCTION outbox._noted_keys(outbox.queues, outbox.commit_hooks);
DROP TABLE outbox.commit_hooks;
CREATE UNLOGGED TABLE outbox.commit_hooks (
  xid xid8 PRIMARY KEY DEFAULT pg_catalog.pg_current_xact_id()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
COMMENT ON TABLE outbox.commit_hooks IS
  'Producers'' open transactions, each queueing its commit step once (internal; empty when idle).';
CREATE UNLOGGED TABLE outbox.commit_notes (
  xid xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
  table_oid oid NOT NULL,
  -- The key and id of each row one statement wrote (aligned).
  keys text[] NOT NULL,
  ids bigint[] NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
CREATE INDEX commit_notes_xid_table_oid ON outbox.commit_notes (xid, table_oid);
COMMENT ON TABLE outbox.commit_notes IS
  'Producers'' open transactions: the rows each statement wrote to a partitioned queue, for the commit step (internal; empty when idle).';
