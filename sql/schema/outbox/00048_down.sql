DROP TABLE outbox.partition_heads_restored;
