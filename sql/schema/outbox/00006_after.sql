-- Every registered partitioned queue gets its own heads trigger function (static SQL, planned once
-- per session); the generic outbox.tg_queue__heads, which planned a dynamic query per statement,
-- goes. A registered queue whose table is gone keeps no trigger: create_queue installs one when it
-- registers the new table.
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
ORDER BY q.queue_id;
DROP FUNCTION outbox.tg_queue__heads();
