ALTER TABLE outbox.commit_hooks DROP COLUMN table_oids, DROP COLUMN keys, DROP COLUMN ids;
