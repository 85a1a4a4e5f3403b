-- Gauges for metrics: pending, ready, leased, backing_off, poisoned, oldest pending.
SELECT * FROM outbox.stats('public.account_events');
-- Partitions whose oldest pending event is older than a minute, and why their head is not moving.
SELECT partition_key, head_id, head_attempt_count, reason
FROM outbox.wedged_partitions('public.account_events', older_than => '1 minute');
-- Empty when the queue has exactly the indexes a claim needs (no missing one, no decoy).
SELECT * FROM outbox.check_indexes('public.account_events');
-- Once the peer (or the payload) is fixed, give poisoned rows a fresh start: bob's event, id 3.
-- It goes to the tail of bob's events with a new id, as if committed now (docs/ordering.md).
SELECT outbox.requeue_poisoned('public.account_events', ARRAY[3]::bigint[]);
-- Retention: delete rows sent over 7 days ago, 10,000 per call; call again until it returns 0.
SELECT outbox.purge_sent('public.account_events', older_than => '7 days', max_rows => 10000);
