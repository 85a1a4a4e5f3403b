-- outbox.drainer_waits and outbox.drainer_woke validate their arguments; on a queue that notifies
-- 'always' there is nothing to mark (0); on 'when_waiting' every mark is larger than the last and
-- lies ahead by the wait; drainer_woke clears only the latest mark. (That producers then notify, and
-- that a producer between check and commit makes drainer_waits answer NULL, needs two sessions:
-- gocheck/notify_when_waiting_test.go.)
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue() AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset

SELECT throws_ok(format($$SELECT outbox.drainer_waits(%L, interval '0')$$, :'q'), '22023',
  'drainer_waits: wait must be positive and at most 1 day, got 00:00:00', 'a wait of zero is refused');
SELECT throws_ok(format($$SELECT outbox.drainer_waits(%L, NULL)$$, :'q'), '22023', NULL, 'a NULL wait is refused');
SELECT throws_ok(format($$SELECT outbox.drainer_woke(%L, -1)$$, :'q'), '22023',
  'drainer_woke: mark must be a mark outbox.drainer_waits returned (0 or more), got -1', 'a negative mark is refused');
SELECT outbox.set_notify(:'q', 'always') IS NULL AS _ \gset
SELECT is(outbox.drainer_waits(:'q', interval '1 minute'), 0::bigint, 'a queue that notifies always: nothing to mark');

SELECT outbox.set_notify(:'q', 'when_waiting') IS NULL AS _ \gset
SELECT outbox.drainer_waits(:'q', interval '1 minute') AS first \gset
SELECT ok(:first BETWEEN (extract(epoch FROM clock_timestamp() + interval '50 seconds') * 1000)::bigint
                     AND (extract(epoch FROM clock_timestamp() + interval '61 seconds') * 1000)::bigint,
          'a mark is the end of the wait, in epoch milliseconds');
SELECT outbox.drainer_waits(:'q', interval '1 second') AS second \gset
SELECT ok(:second > :first, 'a later mark is larger, even for a shorter wait');
SELECT outbox.drainer_woke(:'q', :first) IS NULL AS _ \gset
SELECT is(pg_sequence_last_value(('outbox.drainer_waits_q' || :'qid')::regclass), :second::bigint,
          'drainer_woke of an earlier mark leaves the latest one');
SELECT outbox.drainer_woke(:'q', :second) IS NULL AS _ \gset
SELECT is(pg_sequence_last_value(('outbox.drainer_waits_q' || :'qid')::regclass), 1::bigint,
          'drainer_woke of the latest mark clears it');
SELECT is((SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), 0,
          'the notify gate is not held after the calls');

SELECT * FROM finish();
ROLLBACK;
