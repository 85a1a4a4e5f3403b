DROP FUNCTION outbox._release_row(outbox.queues, bigint, uuid);
