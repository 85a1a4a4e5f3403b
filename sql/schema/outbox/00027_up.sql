-- A producer's commit step finds the queue of the table it wrote by index (outbox.tg_queue__commit,
-- and outbox.tg_queue__truncate): before, it scanned outbox.queues on every commit, so every queue
-- registered in the database made every producer slower (200 queues: about 25 µs more per
-- single-row commit, fsync off). outbox.create_queue already refused a second queue on one table;
-- the constraint says so too, also between two create_queue calls racing for one table.
ALTER TABLE outbox.queues ADD CONSTRAINT queues_table_oid_key UNIQUE (table_oid);
