-- deliver_at is bounded by the queue's max_delay (issue 30, item 2: a producer could park a key for
-- ever): beyond it enqueue and enqueue_event refuse with 22023 naming the argument and change
-- nothing; inside it the row waits until then. A plain INSERT of next_attempt_at (for a role
-- granted it) is held to the same bound by the table's CHECK.
BEGIN;
SELECT plan(11);
SET LOCAL timezone = 'UTC';

SELECT test_helpers.fresh_name() AS q \gset
SELECT outbox.create_queue(:'q', 'k', max_delay => '1 hour');
SELECT test_helpers.state(:'q') AS before \gset
SELECT throws_ok(format($$SELECT outbox.enqueue(%L, 'e', '{}', 'x', deliver_at => '290000-01-01 00:00:00+00')$$, :'q'), '22023',
  'enqueue: deliver_at must be at most the queue''s max_delay (01:00:00) from now, got 290000-01-01 00:00:00+00',
  'enqueue refuses a deliver_at beyond max_delay');
SELECT throws_ok(format($$SELECT * FROM outbox.enqueue_event(%L, 'e', '{}', 'x', deliver_at => clock_timestamp() + interval '61 minutes')$$, :'q'), '22023',
  NULL, 'enqueue_event refuses it too, by a minute');
SELECT is(test_helpers.state(:'q'), :'before', 'the refused calls changed nothing');

SELECT outbox.enqueue(:'q', 'e', '{}', 'x', deliver_at => clock_timestamp() + interval '59 minutes') AS id \gset
SELECT ok((test_helpers.row_json(:'q', :id)->>'next_attempt_at')::timestamptz > clock_timestamp() + interval '58 minutes',
          'a deliver_at inside max_delay is the row''s next attempt');
SELECT outbox.enqueue(:'q', 'later', '{}', 'x') AS later \gset
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'q'), 'the key waits behind it, in order');

-- A plain INSERT of next_attempt_at: the table's CHECK.
SELECT throws_ok(format($$INSERT INTO %s (event_type, payload, k, next_attempt_at) VALUES ('e', '{}', 'y', '290000-01-01')$$, :'q'),
  '23514', format('new row for relation "%s" violates check constraint "pgdrain_next_attempt_at_within_max_delay"', split_part(:'q', '.', 2)),
  'a plain INSERT beyond max_delay breaks the CHECK pgdrain_next_attempt_at_within_max_delay');
SELECT lives_ok(format($$INSERT INTO %s (event_type, payload, k, next_attempt_at) VALUES ('e', '{}', 'y', clock_timestamp() + interval '30 minutes')$$, :'q'),
  'a plain INSERT inside it is accepted');
SELECT results_eq(format($$SELECT convalidated FROM pg_constraint WHERE conrelid = %L::regclass
                           AND conname = 'pgdrain_next_attempt_at_within_max_delay'$$, :'q'),
  $$VALUES (true)$$, 'a table create_queue made has the CHECK, validated');

-- The default, and a queue that allows more.
SELECT test_helpers.new_queue() AS u \gset
SELECT results_eq(format('SELECT max_delay FROM outbox.queue_info(%L)', :'u'), $$VALUES (interval '7 days')$$,
  'max_delay defaults to 7 days (queue_info shows it)');
SELECT throws_ok(format($$SELECT outbox.enqueue(%L, 'e', '{}', deliver_at => clock_timestamp() + interval '8 days')$$, :'u'), '22023',
  NULL, 'by default a deliver_at 8 days ahead is refused');
SELECT outbox.create_queue(:'u', max_delay => '30 days');
SELECT lives_ok(format($$SELECT outbox.enqueue(%L, 'e', '{}', deliver_at => clock_timestamp() + interval '8 days')$$, :'u'),
  'with max_delay 30 days it is accepted');

SELECT * FROM finish();
ROLLBACK;
