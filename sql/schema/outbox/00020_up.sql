-- When producers NOTIFY: 'always' (every insert of an unpartitioned queue, every commit that made a
-- partition claimable), or 'when_waiting': only while a drainer waits for one (outbox.set_notify).
ALTER TABLE outbox.queues ADD COLUMN notify text NOT NULL DEFAULT 'always'
  CONSTRAINT queues_notify_check CHECK (notify IN ('always', 'when_waiting'));
