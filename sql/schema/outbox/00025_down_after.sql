-- The NOTIFY triggers as 00024 made them (the waiting sequence by oid).
SELECT outbox._install_notify_trigger(q)
FROM outbox.queues q
WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
