-- outbox.set_notify validates its arguments and changes nothing when it refuses; 'when_waiting'
-- gives an unpartitioned queue's NOTIFY trigger the queue id and sequence to check, 'always' takes
-- them away again, and create_queue run again keeps the choice. drop_queue drops the sequence.
BEGIN;
SELECT plan(10);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.new_queue('resource_id') AS p \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset

SELECT throws_ok(format($$SELECT outbox.set_notify(%L, 'sometimes')$$, :'q'), '22023',
  'set_notify: notify must be ''always'' or ''when_waiting'', got ''sometimes''', 'an unknown choice is refused, naming it');
SELECT throws_ok(format($$SELECT outbox.set_notify(%L, NULL)$$, :'q'), '22023',
  'set_notify: notify must be ''always'' or ''when_waiting'', got NULL', 'NULL is refused');
SELECT throws_ok($$SELECT outbox.set_notify('public.no_such_queue', 'always')$$, '42P01', NULL, 'an unregistered queue is refused');
SELECT is((SELECT notify FROM outbox.queues WHERE queue = :'q'), 'when_waiting',
          'a refused call changed nothing (a new queue notifies when_waiting, the default since 00024)');

SELECT outbox.set_notify(:'q', 'always') IS NULL AS _ \gset
SELECT outbox.set_notify(:'q', 'when_waiting') IS NULL AS _ \gset
SELECT is((SELECT encode(tgargs, 'escape') FROM pg_trigger WHERE tgrelid = :'q'::regclass AND tgname = 'pgdrain_notify'),
          format('%s\000%s\000%s\000%s\000', (SELECT channel FROM outbox.queues WHERE queue = :'q'), :'q', :'qid',
                 'outbox.drainer_waits_q' || :'qid'),
          'when_waiting: the trigger carries the queue id and the name of its waiting sequence (a restore keeps names, not oids)');
SELECT outbox.create_queue(:'q') IS NULL AS _ \gset
SELECT is((SELECT notify FROM outbox.queues WHERE queue = :'q'), 'when_waiting', 'create_queue again keeps the choice');
SELECT is((SELECT tgnargs::int FROM pg_trigger WHERE tgrelid = :'q'::regclass AND tgname = 'pgdrain_notify'), 4,
          '... and the trigger that goes with it');
SELECT outbox.set_notify(:'q', 'always') IS NULL AS _ \gset
SELECT is((SELECT tgnargs::int FROM pg_trigger WHERE tgrelid = :'q'::regclass AND tgname = 'pgdrain_notify'), 2,
          'always: channel and queue name only');
SELECT outbox.set_notify(:'p', 'when_waiting') IS NULL AS _ \gset
SELECT is_empty(format($$SELECT 1 FROM pg_trigger WHERE tgrelid = %L::regclass AND tgname = 'pgdrain_notify'$$, :'p'),
                'a partitioned queue still has no NOTIFY trigger (its commit step notifies)');
SELECT outbox.drop_queue(:'q') IS NULL AS _ \gset
SELECT is(to_regclass('outbox.drainer_waits_q' || :'qid'), NULL, 'drop_queue drops the waiting sequence');

SELECT * FROM finish();
ROLLBACK;
