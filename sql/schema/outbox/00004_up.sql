-- 00004 nothing stuck: schema changes

-- What outbox.repair fixed, per queue and cause: a counter that should stay at zero. Anything here
-- is a bug of pgdrain's derived state that became a bounded delay instead of a lost event.
CREATE TABLE outbox.repairs (
  queue text NOT NULL,
  cause text NOT NULL,
  repairs bigint NOT NULL,
  last_repair_at timestamptz NOT NULL,
  PRIMARY KEY (queue, cause)
);
COMMENT ON TABLE outbox.repairs IS
  'Repairs of partition heads made by outbox.repair, counted per queue and cause (should stay empty).';

-- The sequence a queue's ids come from (identity, serial, or a DEFAULT nextval of a sequence that
-- need not be OWNED BY the column), found by create_queue (outbox._id_sequence); the commit step
-- renumbers late rows with it. Required for partitioned queues registered by 00004's create_queue;
-- NULL for a queue registered earlier whose id has no such sequence.
ALTER TABLE outbox.queues ADD COLUMN id_sequence regclass;
COMMENT ON COLUMN outbox.queues.id_sequence IS
  'The ascending sequence the queue table''s id comes from (for renumbering late rows at commit); NULL = none.';
