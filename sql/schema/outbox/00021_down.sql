DROP FUNCTION outbox._commit_partitions(outbox.queues, text[], bigint[]);
DROP TABLE outbox.commit_notes;
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
