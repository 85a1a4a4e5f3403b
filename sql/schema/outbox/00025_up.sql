-- A queue survives pg_dump / pg_restore (issue 30, item 1): the registry names its table by
-- regclass, which pg_dump writes as the table's name and pg_restore reads back as the restored
-- table's oid (an oid column kept the old number, and every function then said the table was
-- gone). Binary-compatible: no rewrite. pg_upgrade accepts regclass columns (it keeps pg_class oids).
ALTER TABLE outbox.queues ALTER COLUMN table_oid TYPE regclass USING table_oid::regclass;
COMMENT ON COLUMN outbox.queues.table_oid IS
  'The queue table (regclass: dumped as its name, so a restore registers the restored table).';

-- Every caller-chosen next attempt is bounded by the queue's max_delay (issue 30, item 2): enqueue's
-- deliver_at, a worker's retry_at and a plain INSERT of next_attempt_at. Registered queues get the
-- default; create_queue takes it as a new last argument and queue_info returns it, so both are
-- dropped first (a second signature would make calls ambiguous; a result can not change in place).
ALTER TABLE outbox.queues ADD COLUMN max_delay interval NOT NULL DEFAULT '7 days'
  CONSTRAINT queues_max_delay_check CHECK (max_delay > interval '0');
COMMENT ON COLUMN outbox.queues.max_delay IS
  'How far ahead a deliver_at, retry_at or plain next_attempt_at may be (create_queue''s max_delay).';
DROP FUNCTION outbox.create_queue(text, text, integer, interval, interval, text, text);
DROP FUNCTION outbox.queue_info(text);

-- Operators' actions on rows (issue 30, item 3): poison_row, retry_row and dismiss_poisoned write
-- one row here per row they change, with the login role and the reason (read with operator_log).
-- Kept by name, so it outlives a queue's registration; written only by those functions.
CREATE TABLE outbox.operator_actions (
  action_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  acted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  acted_by text NOT NULL DEFAULT session_user,
  queue text NOT NULL,
  action text NOT NULL CHECK (action IN ('poison', 'retry', 'dismiss')),
  row_id bigint NOT NULL,
  event_id uuid,
  partition_key text,
  attempt_count integer NOT NULL,
  reason text
);
CREATE INDEX operator_actions_queue ON outbox.operator_actions (queue, action_id);
COMMENT ON TABLE outbox.operator_actions IS
  'Operators'' actions on queue rows (poison_row, retry_row, dismiss_poisoned): who, when, why; read with outbox.operator_log.';

-- Claims take a partition's run (issue 28): the internal claim gets the run length.
DROP FUNCTION outbox._claim(outbox.queues, integer, interval, text);
DROP FUNCTION outbox._locked_here(regclass, bigint[]);
-- claim_batch and claim_locked become SQL functions over the bodies they share with claim_runs and
-- claim_locked_runs (a function's language can change in place, its result type stays).

-- A transaction's first statement notes in its hook (issue 29: the usual transaction, one statement,
-- writes and deletes no note row); later statements in outbox.commit_notes, and say so here.
ALTER TABLE outbox.commit_hooks ADD COLUMN more_notes boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN outbox.commit_hooks.keys IS
  'The key and id of every row the first statement wrote (SERIALIZABLE: every statement), and its table (aligned); later statements note in outbox.commit_notes.';
COMMENT ON COLUMN outbox.commit_hooks.more_notes IS
  'Whether a later statement noted rows in outbox.commit_notes (never in SERIALIZABLE transactions).';

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
ANALYZE outbox.partition_heads;
ANALYZE outbox.partition_clocks;
-- The one-row commit step moved into outbox.tg_queue__commit (a function call less per commit).
DROP FUNCTION outbox._commit_partitions(outbox.queues, text[], bigint[]);
