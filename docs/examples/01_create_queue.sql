-- A queue is a table. create_queue creates it (or adopts yours), adds exactly the two partial
-- indexes a claim needs and the NOTIFY trigger, and registers it. Events of one account are
-- delivered in order; different accounts go in parallel.
SELECT outbox.create_queue('public.account_events', partition_column => 'account_id');
