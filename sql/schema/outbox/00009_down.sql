-- Back to 00008: commit locks are advisory locks again, a transaction of many statements keeps
-- every key in its settings (the functions below).
DROP FUNCTION outbox._noted_keys(outbox.queues, boolean);
