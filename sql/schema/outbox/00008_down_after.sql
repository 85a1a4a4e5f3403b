-- The heads trigger functions call 00007's outbox._note_written again.
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
ORDER BY q.queue_id;
