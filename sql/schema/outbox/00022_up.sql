-- Wake notes are looked up by key (a producer making a new key's head, outbox.repair) as well as
-- read by queue (a claim applying them): indexed by queue alone, every new key's commit step read
-- every wake note of its queue, and a slow lock-mode batch that holds busy heads leaves thousands
-- (5,000 notes: a single-row producer of a new key 0.39 -> 0.79 ms). The queue's notes are still a
-- prefix of the new index.
CREATE INDEX partition_wakes_queue_key ON outbox.partition_wakes (queue_id, partition_key);
DROP INDEX outbox.partition_wakes_queue;
