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
