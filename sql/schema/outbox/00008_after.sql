-- The heads trigger functions call outbox._note_written with its new arguments.
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
ORDER BY q.queue_id;
