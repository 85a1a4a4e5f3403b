ALTER TABLE outbox.queues ALTER COLUMN table_oid TYPE oid USING table_oid::oid;
COMMENT ON COLUMN outbox.queues.table_oid IS NULL;
