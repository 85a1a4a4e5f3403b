-- Per-key commit order (issue 6): the largest committed id per (queue, 16-bit key hash), written
-- only by producers' commit step under the hash's commit lock (outbox._commit_partitions). A
-- producer whose smallest id of a key is below it committed late and has its rows renumbered.
-- UNLOGGED like partition_heads: crash recovery ends every open transaction, so an empty table is
-- a correct state to restart from.
CREATE UNLOGGED TABLE outbox.partition_clocks (
  queue_id integer NOT NULL,
  slot integer NOT NULL,
  committed_max bigint NOT NULL,
  PRIMARY KEY (queue_id, slot)
) WITH (fillfactor = 50);
COMMENT ON TABLE outbox.partition_clocks IS
  'Largest committed id per queue and key hash (hashtext(key) & 65535), for per-key commit order (internal).';

-- One row per open transaction that wrote a partitioned queue, inserted by its first statement
-- and deleted by its commit step; its only purpose is the deferred trigger event (see
-- outbox.tg_queue__commit). Keeping that event off the queue tables keeps their DDL and TRUNCATE
-- possible in the producing transaction.
CREATE UNLOGGED TABLE outbox.commit_hooks (
  xid xid8 PRIMARY KEY DEFAULT pg_catalog.pg_current_xact_id()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
COMMENT ON TABLE outbox.commit_hooks IS
  'Producers'' open transactions, each queueing its commit step (internal; empty when idle).';
