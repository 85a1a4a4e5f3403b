-- Where a rebuild of a queue's partition heads stopped (outbox._restore_heads rebuilds in parts,
-- each committed with its claim). UNLOGGED with the heads: a crash empties both, and the rebuild
-- starts over.
CREATE UNLOGGED TABLE outbox.partition_heads_restored (
  queue_id integer CONSTRAINT partition_heads_restored_pkey PRIMARY KEY,
  after_key text NOT NULL
);
COMMENT ON TABLE outbox.partition_heads_restored IS
  'Partitioned queues whose partition_heads are being rebuilt: the last key done so far (internal; emptied by crash recovery).';
