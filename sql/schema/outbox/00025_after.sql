-- Unpartitioned queues that notify 'when_waiting' get their NOTIFY trigger again, naming their
-- drainers' waiting sequence instead of carrying its oid (which a restore does not keep).
SELECT outbox._install_notify_trigger(q)
FROM outbox.queues q
WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
