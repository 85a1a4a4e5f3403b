CREATE INDEX partition_wakes_queue ON outbox.partition_wakes (queue_id);
DROP INDEX outbox.partition_wakes_queue_key;
