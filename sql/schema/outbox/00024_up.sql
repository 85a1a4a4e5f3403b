-- New queues notify only while a drainer waits (set_notify 'when_waiting'); registered queues keep
-- what they have (issue 29, item 3).
ALTER TABLE outbox.queues ALTER COLUMN notify SET DEFAULT 'when_waiting';
