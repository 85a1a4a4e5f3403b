-- Back to 00004: the functions 00005 replaced get their 00004 bodies back.
DROP FUNCTION outbox._first_lease_end(outbox.queues, integer);
ALTER TABLE outbox.queues DROP COLUMN clock_base;
