CREATE SCHEMA outbox;
COMMENT ON SCHEMA outbox IS 'pgdrain: transactional outbox drainer (leases with fencing tokens, or the claim transaction)';

CREATE TABLE outbox.queues (
  queue_id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue text NOT NULL CONSTRAINT queues_queue_key UNIQUE,
  table_oid oid NOT NULL,
  partition_column text,
  partition_type text,
  max_attempts integer NOT NULL CHECK (max_attempts BETWEEN 1 AND 1000),
  backoff_min interval NOT NULL,
  backoff_max interval NOT NULL,
  permanent_policy text NOT NULL CHECK (permanent_policy IN ('poison', 'retry')),
  channel text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  CHECK (permanent_policy = 'poison' OR partition_column IS NULL),
  CHECK ((partition_column IS NULL) = (partition_type IS NULL))
);
COMMENT ON TABLE outbox.queues IS 'Registry of queues: one row per queue table, written by outbox.create_queue.';

-- One row per partition that has pending work: its first deliverable row (head_id), and until when
-- it is parked (leased or backing off; NULL = ready). Claims read this table, never the blocked
-- successors, so their cost does not grow with the backlog.
-- UNLOGGED: it is derived state, rewritten on every claim and result, and rebuildable from the
-- queue tables; not writing WAL for it is most of what it costs. After a crash (or on a promoted
-- standby) PostgreSQL empties it, and so outbox.partition_heads_built, and the next claim of each
-- queue rebuilds its heads from the queue table (outbox._restore_heads).
CREATE UNLOGGED TABLE outbox.partition_heads (
  queue_id integer NOT NULL,
  partition_key text NOT NULL,
  head_id bigint,
  attempt_count integer NOT NULL DEFAULT 0,
  parked_until timestamptz,
  floor_id bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (queue_id, partition_key)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
CREATE INDEX partition_heads_ready ON outbox.partition_heads (queue_id, attempt_count, head_id)
  WHERE parked_until IS NULL;
CREATE INDEX partition_heads_parked ON outbox.partition_heads (queue_id, parked_until)
  WHERE parked_until IS NOT NULL;
COMMENT ON TABLE outbox.partition_heads IS
  'Claimable partition heads of partitioned queues (internal; maintained by triggers and the outbox functions).';
COMMENT ON COLUMN outbox.partition_heads.floor_id IS
  'Every row of the partition with a smaller id is sent or poisoned: searches for the head start here, '
  'so poisoned rows are skipped once, not on every claim. Raised only while no producer of the '
  'partition is in flight (its advisory lock, see tg_queue__heads); a producer whose rows fall below it lowers it.';
COMMENT ON COLUMN outbox.partition_heads.parked_until IS
  'Until when the head is not claimable (its lease or backoff); NULL = ready to claim.';

-- A row per partitioned queue whose heads are complete. Emptied with partition_heads by crash
-- recovery, which is how a claim knows it must rebuild them first.
CREATE UNLOGGED TABLE outbox.partition_heads_built (
  queue_id integer PRIMARY KEY
);
COMMENT ON TABLE outbox.partition_heads_built IS
  'Partitioned queues whose partition_heads are complete (internal; emptied by crash recovery).';
