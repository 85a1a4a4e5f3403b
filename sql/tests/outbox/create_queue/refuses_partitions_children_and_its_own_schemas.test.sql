-- create_queue refuses tables whose rows it could not deliver as a queue's (22023, naming the
-- table, nothing changed): a partition of a partitioned table (inserts through the parent fire
-- none of the partition's statement triggers; it failed inside DDL with PostgreSQL's 42809), a
-- table with inheritance children (every statement on it reads the children's rows: claims handed
-- them out), and tables of pgdrain's own schemas. A backoff_min over a day is blamed on itself.
-- Partitions of a range-partitioned queue table are not inheritance children.
BEGIN;
SELECT plan(8);

CREATE TABLE public.cq_parted (id bigint PRIMARY KEY, event_type text NOT NULL, payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()) PARTITION BY RANGE (id);
CREATE TABLE public.cq_parted_1 PARTITION OF public.cq_parted FOR VALUES FROM (1) TO (1000);
CREATE TABLE public.cq_parent (id bigint PRIMARY KEY, event_type text NOT NULL, payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE public.cq_child () INHERITS (public.cq_parent);
SELECT count(*) AS queues_before FROM outbox.queues \gset

SELECT throws_ok($$SELECT outbox.create_queue('public.cq_parted_1')$$, '22023',
  'create_queue: queue public.cq_parted_1 is a partition of public.cq_parted: register the partitioned table instead',
  'a partition is refused, naming its partitioned table');
SELECT throws_ok($$SELECT outbox.create_queue('public.cq_parent')$$, '22023',
  'create_queue: queue public.cq_parent must not have inheritance children (their rows would be claimed through it), got public.cq_child',
  'a table with inheritance children is refused, naming them');
SELECT throws_ok($$SELECT outbox.create_queue('outbox.q_new')$$, '22023',
  'create_queue: queue must be a table of an application''s schema, not of pgdrain''s own schema outbox, got outbox.q_new',
  'a table in the outbox schema is refused');
SELECT throws_ok($$SELECT outbox.create_queue('alr.q_new')$$, '22023', NULL, 'and in the alr schema');
SELECT throws_ok($$SELECT outbox.create_queue('public.cq_never', backoff_min => '2 days')$$, '22023',
  'create_queue: backoff_min must be at most 1 day, got 2 days', 'a backoff_min over a day names backoff_min');
SELECT is((SELECT count(*) FROM outbox.queues), :queues_before::bigint, '... and nothing was registered');
SELECT is(to_regclass('public.cq_never'), NULL, '... nor made');

SELECT lives_ok($$SELECT outbox.create_queue('public.cq_parted')$$,
  'the partitioned table itself registers (its partitions are not inheritance children)');

SELECT * FROM finish();
ROLLBACK;
