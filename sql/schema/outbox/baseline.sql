-- Module outbox as of release 0.1.0: every table, index, constraint, comment and role the
-- development history (sql/history/outbox, 00001..) leaves behind, written as its final form.
-- The functions come from sql/functions/outbox, the trigger that needs one of them from
-- baseline_after.sql, the grants from sql/privileges/outbox.sql (scripts/fold-baseline.sh puts
-- them together; gocheck TestBaseline_EqualsTheHistory proves the result equals the history).

-- The four roles of pgdrain (cluster-wide, NOLOGIN: grant them to your login roles). Created only
-- when missing, so a second database on the same cluster (or a DBA who created them beforehand,
-- when the migrating role lacks CREATEROLE) is fine; two databases migrating at once race on
-- pg_authid's unique index, and the loser simply finds the role there. Module alr makes the same.
DO $roles$
DECLARE
  v_role text;
BEGIN
  FOREACH v_role IN ARRAY ARRAY['pgdrain_worker', 'pgdrain_producer', 'pgdrain_operator', 'pgdrain_reader'] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = v_role) THEN
      BEGIN
        EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
      END;
    END IF;
  END LOOP;
END
$roles$;

-- A database migrated during development to a migration before 00025 has schema outbox but not
-- this migration: it must apply the rest of that history first, then it is at 00025 like this one.
DO $guard$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = 'outbox') THEN
    RAISE EXCEPTION 'schema outbox exists already: a database migrated before outbox 00025 (0.1.0) applies the rest of sql/history/outbox first (docs/install.md)'
      USING ERRCODE = '42P06';
  END IF;
END
$guard$;

CREATE SCHEMA outbox;
COMMENT ON SCHEMA outbox IS 'pgdrain: transactional outbox drainer (leases with fencing tokens, or the claim transaction)';

-- The registry: one row per queue table, written by outbox.create_queue.
CREATE TABLE outbox.queues (
  queue_id integer GENERATED ALWAYS AS IDENTITY CONSTRAINT queues_pkey PRIMARY KEY,
  queue text NOT NULL CONSTRAINT queues_queue_key UNIQUE,
  -- regclass, not oid: pg_dump writes it as the table's name and pg_restore reads it back as the
  -- restored table (pg_upgrade keeps pg_class oids, so it accepts the column).
  table_oid regclass NOT NULL,
  partition_column text,
  partition_type text,
  max_attempts integer NOT NULL CONSTRAINT queues_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 1000),
  backoff_min interval NOT NULL,
  backoff_max interval NOT NULL,
  permanent_policy text NOT NULL CONSTRAINT queues_permanent_policy_check CHECK (permanent_policy IN ('poison', 'retry')),
  channel text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  -- The sequence a queue's ids come from (identity, serial, or a DEFAULT nextval of a sequence that
  -- need not be OWNED BY the column), found by create_queue (outbox._id_sequence); the commit step
  -- renumbers late rows with it.
  id_sequence regclass,
  -- Per-key commit order across a (re)registration or a TRUNCATE: a hash with no clock counts from
  -- here (the sequence's last value at that moment), since sessions with a cached sequence may still
  -- hand out ids below ones committed before.
  clock_base bigint NOT NULL DEFAULT 0,
  -- When producers NOTIFY: 'always' (every insert of an unpartitioned queue, every commit that made
  -- a partition claimable), or 'when_waiting': only while a drainer waits for one (outbox.set_notify).
  notify text NOT NULL DEFAULT 'when_waiting' CONSTRAINT queues_notify_check CHECK (notify IN ('always', 'when_waiting')),
  -- Every caller-chosen next attempt (enqueue's deliver_at, a worker's retry_at, a plain INSERT of
  -- next_attempt_at) is bounded by it.
  max_delay interval NOT NULL DEFAULT '7 days' CONSTRAINT queues_max_delay_check CHECK (max_delay > interval '0'),
  CONSTRAINT queues_check CHECK (permanent_policy = 'poison' OR partition_column IS NULL),
  CONSTRAINT queues_check1 CHECK ((partition_column IS NULL) = (partition_type IS NULL))
);
COMMENT ON TABLE outbox.queues IS 'Registry of queues: one row per queue table, written by outbox.create_queue.';
COMMENT ON COLUMN outbox.queues.table_oid IS
  'The queue table (regclass: dumped as its name, so a restore registers the restored table).';
COMMENT ON COLUMN outbox.queues.id_sequence IS
  'The ascending sequence the queue table''s id comes from (for renumbering late rows at commit); NULL = none.';
COMMENT ON COLUMN outbox.queues.max_delay IS
  'How far ahead a deliver_at, retry_at or plain next_attempt_at may be (create_queue''s max_delay).';

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
  CONSTRAINT partition_heads_pkey PRIMARY KEY (queue_id, partition_key)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
CREATE INDEX partition_heads_ready ON outbox.partition_heads (queue_id, attempt_count, head_id)
  WHERE parked_until IS NULL;
CREATE INDEX partition_heads_parked ON outbox.partition_heads (queue_id, parked_until)
  WHERE parked_until IS NOT NULL;
COMMENT ON TABLE outbox.partition_heads IS
  'Claimable partition heads of partitioned queues (internal; maintained by triggers and the outbox functions).';
COMMENT ON COLUMN outbox.partition_heads.floor_id IS
  'Every row of the partition with a smaller id is sent or poisoned: searches for the head start here, '
  'so poisoned rows are skipped once, not on every claim. Raised only with the head locked FOR UPDATE '
  '(a committing producer holds it FOR KEY SHARE); a producer whose rows fall below it lowers it.';
COMMENT ON COLUMN outbox.partition_heads.parked_until IS
  'Until when the head is not claimable (its lease or backoff); NULL = ready to claim.';

-- A row per partitioned queue whose heads are complete. Emptied with partition_heads by crash
-- recovery, which is how a claim knows it must rebuild them first.
CREATE UNLOGGED TABLE outbox.partition_heads_built (
  queue_id integer CONSTRAINT partition_heads_built_pkey PRIMARY KEY
);
COMMENT ON TABLE outbox.partition_heads_built IS
  'Partitioned queues whose partition_heads are complete (internal; emptied by crash recovery).';

-- Per-key commit order: the largest committed id per (queue, 16-bit key hash), written only by
-- producers' commit step (outbox.tg_queue__commit), which takes a hash's commit lock and raises
-- its clock in one statement, keeping the clock it found in previous_max. A producer whose smallest
-- id of a key is below it committed late and has its rows renumbered.
-- UNLOGGED like partition_heads: crash recovery ends every open transaction, so an empty table is
-- a correct state to restart from.
CREATE UNLOGGED TABLE outbox.partition_clocks (
  queue_id integer NOT NULL,
  slot integer NOT NULL,
  committed_max bigint NOT NULL,
  previous_max bigint,
  CONSTRAINT partition_clocks_pkey PRIMARY KEY (queue_id, slot)
) WITH (fillfactor = 50);
COMMENT ON TABLE outbox.partition_clocks IS
  'Largest committed id per queue and key hash (hashtext(key) & 65535), for per-key commit order (internal).';
COMMENT ON COLUMN outbox.partition_clocks.previous_max IS
  'The clock as the last commit step of this hash found it, before raising it (internal).';

-- The planner keeps each statement on these tables planned once per session, from their statistics.
-- Analyzed in a database of many small queues, they said a queue has a handful of heads, and a
-- result's statement then walked every head of its queue once per key it refreshed (a drain of
-- 10,000 keys compared 80,000 rows per result of 8; gocheck
-- TestResults_WorkDoesNotGrowWithTheQueuesHeads). Planned as if one queue held every head and
-- every key were its own, a plan probes the given keys' heads one by one, as these statements are
-- written to; n_distinct survives every ANALYZE.
ALTER TABLE outbox.partition_heads ALTER COLUMN queue_id SET (n_distinct = 1),
  ALTER COLUMN partition_key SET (n_distinct = -1);
ALTER TABLE outbox.partition_clocks ALTER COLUMN queue_id SET (n_distinct = 1),
  ALTER COLUMN slot SET (n_distinct = -1);

-- One row per open transaction that wrote a partitioned queue, inserted (ON CONFLICT DO NOTHING) by
-- its first statement and deleted by its commit step; the insert queues the commit step, through
-- the deferred trigger pgdrain_commit (baseline_after.sql, outbox.tg_queue__commit). Keeping that
-- event off the queue tables keeps their DDL and TRUNCATE possible in the producing transaction.
-- The first statement's notes are in it too (table_oids, keys, ids): the usual transaction, one
-- statement, writes and deletes no note row. Later statements note in outbox.commit_notes and
-- set more_notes. A SERIALIZABLE transaction keeps all its notes here, which its commit step finds
-- by the primary key's arbiter (no predicate lock) and deletes by ctid: notes read by index from
-- outbox.commit_notes would make a chain of read/write dependencies between unrelated producers
-- that PostgreSQL cancels (40001).
CREATE UNLOGGED TABLE outbox.commit_hooks (
  xid xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
  table_oids oid[],
  keys text[],
  ids bigint[],
  more_notes boolean NOT NULL DEFAULT false,
  CONSTRAINT commit_hooks_pkey PRIMARY KEY (xid)
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
COMMENT ON TABLE outbox.commit_hooks IS
  'Producers'' open transactions, each queueing its commit step once (internal; empty when idle).';
COMMENT ON COLUMN outbox.commit_hooks.keys IS
  'The key and id of every row the first statement wrote (SERIALIZABLE: every statement), and its table (aligned); later statements note in outbox.commit_notes.';
COMMENT ON COLUMN outbox.commit_hooks.more_notes IS
  'Whether a later statement noted rows in outbox.commit_notes (never in SERIALIZABLE transactions).';

-- Producers' notes: one row per statement that wrote a partitioned queue, inserted and never
-- updated (an appended row per transaction made n statements cost O(n²)), read and deleted by the
-- transaction's commit step.
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

-- Producers take no lock when they write: a committing producer holds its keys' heads FOR KEY
-- SHARE, and leaves a wake note here for a head a claim holds, which the next claim applies
-- (outbox._apply_wakes). Looked up by key (a producer making a new key's head, outbox.repair) as
-- well as read by queue (a claim applying them): the queue's notes are a prefix of the index.
CREATE UNLOGGED TABLE outbox.partition_wakes (
  queue_id integer NOT NULL,
  partition_key text NOT NULL,
  low_id bigint NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
CREATE INDEX partition_wakes_queue_key ON outbox.partition_wakes (queue_id, partition_key);
COMMENT ON TABLE outbox.partition_wakes IS
  'Committed rows whose partition head a claim held while their producer committed; applied by the next claim (internal).';

-- What outbox.repair fixed, per queue and cause: a counter that should stay at zero. Anything here
-- is a bug of pgdrain's derived state that became a bounded delay instead of a lost event.
CREATE TABLE outbox.repairs (
  queue text NOT NULL,
  cause text NOT NULL,
  repairs bigint NOT NULL,
  last_repair_at timestamptz NOT NULL,
  CONSTRAINT repairs_pkey PRIMARY KEY (queue, cause)
);
COMMENT ON TABLE outbox.repairs IS
  'Repairs of partition heads made by outbox.repair, counted per queue and cause (should stay empty).';

-- Operators' actions on rows: poison_row, retry_row and dismiss_poisoned write one row here per row
-- they change, with the login role and the reason (read with operator_log). Kept by name, so it
-- outlives a queue's registration; written only by those functions.
CREATE TABLE outbox.operator_actions (
  action_id bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT operator_actions_pkey PRIMARY KEY,
  acted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  acted_by text NOT NULL DEFAULT session_user,
  queue text NOT NULL,
  action text NOT NULL CONSTRAINT operator_actions_action_check CHECK (action IN ('poison', 'retry', 'dismiss')),
  row_id bigint NOT NULL,
  event_id uuid,
  partition_key text,
  attempt_count integer NOT NULL,
  reason text
);
CREATE INDEX operator_actions_queue ON outbox.operator_actions (queue, action_id);
COMMENT ON TABLE outbox.operator_actions IS
  'Operators'' actions on queue rows (poison_row, retry_row, dismiss_poisoned): who, when, why; read with outbox.operator_log.';
