-- create_queue's max_delay (issue 30, item 2): between backoff_max (a backoff is a next attempt
-- too) and 3650 days, refused otherwise with 22023 changing nothing; recorded in the registry and
-- shown by queue_info; the table's CHECK follows a change (a lowered limit refuses what the old
-- one allowed), kept by create_queue run again with the same limit.
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.state(:'q') AS before \gset
SELECT throws_ok(format($$SELECT outbox.create_queue(%L, 'k', max_delay => '10 seconds')$$, :'q'), '22023',
  'create_queue: max_delay must be between backoff_max (00:00:30) and 3650 days, got 00:00:10',
  'a max_delay below backoff_max is refused');
SELECT throws_ok(format($$SELECT outbox.create_queue(%L, 'k', max_delay => '3651 days')$$, :'q'), '22023',
  'create_queue: max_delay must be between backoff_max (00:00:30) and 3650 days, got 3651 days',
  'a max_delay over 3650 days is refused');
SELECT throws_ok(format($$SELECT outbox.create_queue(%L, 'k', max_delay => NULL)$$, :'q'), '22023',
  'create_queue: max_delay must be between backoff_max (00:00:30) and 3650 days, got NULL',
  'a NULL max_delay is refused');
SELECT is(test_helpers.state(:'q'), :'before', 'the refused calls changed nothing');

SELECT outbox.create_queue(:'q', 'k', max_delay => '2 days');
SELECT results_eq(format('SELECT max_delay FROM outbox.queue_info(%L)', :'q'), $$VALUES (interval '2 days')$$,
  'queue_info shows the new max_delay');
SELECT throws_ok(format($$INSERT INTO %s (event_type, payload, k, next_attempt_at) VALUES ('e', '{}', 'y', clock_timestamp() + interval '3 days')$$, :'q'),
  '23514', NULL, 'the table''s CHECK follows a lowered limit');
SELECT lives_ok(format($$INSERT INTO %s (event_type, payload, k, next_attempt_at) VALUES ('e', '{}', 'y', clock_timestamp() + interval '1 day')$$, :'q'),
  '... and accepts what it allows');
SELECT test_helpers.state(:'q') AS before \gset
SELECT outbox.create_queue(:'q', 'k', max_delay => '2 days');
SELECT is(test_helpers.state(:'q'), :'before', 'create_queue again with the same limit changes nothing');
SELECT is((SELECT count(*) FROM pg_constraint WHERE conrelid = :'q'::regclass
           AND conname = 'pgdrain_next_attempt_at_within_max_delay'), 1::bigint, 'the table has one such CHECK');

SELECT * FROM finish();
ROLLBACK;
