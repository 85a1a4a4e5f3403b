-- Queues registered before this migration get the commit-step trigger.
SELECT outbox._queue_triggers(q) FROM outbox.queues q ORDER BY q.queue_id;
