DROP FUNCTION outbox._commit_partitions(outbox.queues, outbox.commit_hooks);
DROP FUNCTION outbox._commit_keys(outbox.queues, text[], bigint[], bigint[], boolean);
DROP FUNCTION outbox._noted_keys(outbox.queues, outbox.commit_hooks);
DROP FUNCTION outbox._note_written(oid, text[], bigint[]);
DROP TABLE outbox.commit_hooks;
CREATE UNLOGGED TABLE outbox.commit_hooks (
  xid xid8 PRIMARY KEY DEFAULT pg_catalog.pg_current_xact_id()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
COMMENT ON TABLE outbox.commit_hooks IS
  'Producers'' open transactions, each queueing its commit step (internal; empty when idle).';
ALTER TABLE outbox.partition_clocks DROP COLUMN previous_max;
