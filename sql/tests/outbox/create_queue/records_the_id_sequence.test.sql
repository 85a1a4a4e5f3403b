-- create_queue records the sequence a queue's ids come from (outbox.queues.id_sequence): an identity,
-- a serial, or a DEFAULT nextval of a sequence that is not OWNED BY the column; a partitioned queue
-- whose id comes from no ascending sequence is refused (per-key commit order renumbers with it).
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT is((SELECT id_sequence FROM outbox.queues WHERE queue = :'q'), pg_get_serial_sequence(:'q', 'id')::regclass,
          'a created table''s identity sequence is recorded');

CREATE SEQUENCE public.reg_shared_ids;
CREATE TABLE public.reg_free_seq (id bigint PRIMARY KEY DEFAULT nextval('public.reg_shared_ids'), event_type text NOT NULL,
  payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), k text NOT NULL);
SELECT lives_ok($$SELECT outbox.create_queue('public.reg_free_seq', 'k')$$,
                'a table whose id default uses a sequence it does not own is adopted');
SELECT is((SELECT id_sequence FROM outbox.queues WHERE queue = 'public.reg_free_seq'), 'public.reg_shared_ids'::regclass,
          'that sequence is recorded');
SELECT ok(has_sequence_privilege('pgdrain_producer', 'public.reg_shared_ids', 'USAGE'),
          'and producers may use it');

CREATE TABLE public.reg_no_seq (id bigint PRIMARY KEY, event_type text NOT NULL, payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), k text NOT NULL);
SELECT throws_ok($$SELECT outbox.create_queue('public.reg_no_seq', 'k')$$, '22023',
  'create_queue: queue public.reg_no_seq is partitioned, so its id must come from an ascending sequence (identity, serial or DEFAULT nextval(''a_sequence'')): per-key commit order renumbers late rows with it',
  'a partitioned queue whose id has no sequence is refused');
SELECT lives_ok($$SELECT outbox.create_queue('public.reg_no_seq')$$, 'an unpartitioned one is adopted');
SELECT is((SELECT id_sequence FROM outbox.queues WHERE queue = 'public.reg_no_seq'), NULL, 'with no sequence recorded');

CREATE TABLE public.reg_odd_seq (id bigint PRIMARY KEY DEFAULT nextval('public.reg_shared_ids') * 2, event_type text NOT NULL,
  payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), k text NOT NULL);
SELECT throws_ok($$SELECT outbox.create_queue('public.reg_odd_seq', 'k')$$, '22023', NULL,
                 'a default that is not a bare nextval is refused for a partitioned queue');
CREATE SEQUENCE public.reg_down_ids INCREMENT BY -1;
CREATE TABLE public.reg_down_seq (id bigint PRIMARY KEY DEFAULT nextval('public.reg_down_ids'), event_type text NOT NULL,
  payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), k text NOT NULL);
SELECT throws_ok($$SELECT outbox.create_queue('public.reg_down_seq', 'k')$$, '22023', NULL,
                 'so is a descending sequence');

SELECT * FROM finish();
ROLLBACK;
