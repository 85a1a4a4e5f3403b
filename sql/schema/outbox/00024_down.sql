ALTER TABLE outbox.queues ALTER COLUMN notify SET DEFAULT 'always';
