-- Every registered partitioned queue gets the claim hints its claims share (outbox._install_claim_hints).
SELECT outbox._install_claim_hints(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL
ORDER BY q.queue_id;
