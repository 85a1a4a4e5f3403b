-- A queue survives pg_dump / pg_restore (issue 30, item 1): the registry names its table by
-- regclass, which pg_dump writes as the table's name and pg_restore reads back as the restored
-- table's oid (an oid column kept the old number, and every function then said the table was
-- gone). Binary-compatible: no rewrite. pg_upgrade accepts regclass columns (it keeps pg_class oids).
ALTER TABLE outbox.queues ALTER COLUMN table_oid TYPE regclass USING table_oid::regclass;
COMMENT ON COLUMN outbox.queues.table_oid IS
  'The queue table (regclass: dumped as its name, so a restore registers the restored table).';
