DROP FUNCTION outbox.create_queue(text, text, integer, interval, interval, text, text, interval);
DROP FUNCTION outbox.queue_info(text);
DROP FUNCTION outbox._check_delay(text, text, outbox.queues, timestamptz[], boolean);
DROP FUNCTION outbox._guard_next_attempt_at(regclass, interval, boolean, boolean);
ALTER TABLE outbox.queues DROP COLUMN max_delay;
ALTER TABLE outbox.queues ALTER COLUMN table_oid TYPE oid USING table_oid::oid;
COMMENT ON COLUMN outbox.queues.table_oid IS NULL;
