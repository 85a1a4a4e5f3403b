-- Every registered queue gets the sequence in which its drainers say they wait (and unpartitioned
-- ones their NOTIFY trigger again, unchanged: every queue notifies 'always' until set_notify).
SELECT outbox._install_notify_trigger(q)
FROM outbox.queues q
WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
