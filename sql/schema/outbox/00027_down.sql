ALTER TABLE outbox.queues DROP CONSTRAINT queues_table_oid_key;
