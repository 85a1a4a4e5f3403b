-- 00005 drains at depth: schema changes (none yet)

-- Per-key commit order across a (re)registration or a TRUNCATE: a hash with no clock counts from
-- here (the sequence's last value at that moment), since sessions with a cached sequence may still
-- hand out ids below ones committed before.
ALTER TABLE outbox.queues ADD COLUMN clock_base bigint NOT NULL DEFAULT 0;
