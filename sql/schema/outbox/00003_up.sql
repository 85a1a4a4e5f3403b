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
