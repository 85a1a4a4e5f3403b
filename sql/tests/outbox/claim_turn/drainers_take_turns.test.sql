-- outbox.claim_turn paces a queue's drainers together: the first to ask gets the turn (0), and
-- until the pause has passed every other ask is told how long is left; then the next ask gets it.
-- Both kinds of queue have the turn; a queue without it (registered before it existed) always
-- answers 0; drop_queue drops it. A refused call changes nothing. Crash recovery resets the
-- UNLOGGED turn (never called: no last value): the next ask takes the turn and sets it again.
-- As pgdrain_worker.
BEGIN;
SELECT plan(17);

SELECT test_helpers.new_queue('resource_id') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.new_queue() AS u \gset
SELECT queue_id AS uid FROM outbox.queues WHERE queue = :'u' \gset

SELECT isnt(to_regclass('outbox.claim_turn_q' || :'qid'), NULL, 'a partitioned queue has its claim turn');
SELECT isnt(to_regclass('outbox.claim_turn_q' || :'uid'), NULL, 'an unpartitioned queue has its claim turn');

SET LOCAL ROLE pgdrain_worker;
SELECT is(outbox.claim_turn(:'q', interval '5 seconds'), interval '0', 'the first to ask takes the turn');
SELECT ok(outbox.claim_turn(:'q', interval '5 seconds') BETWEEN interval '4 seconds' AND interval '5 seconds',
          'the next ask within the pause is told how long is left');
SELECT ok(outbox.claim_turn(:'q', interval '50 milliseconds') BETWEEN interval '1 millisecond' AND interval '50 milliseconds',
          'the pause is the caller''s: a shorter one is over sooner');
SELECT is(outbox.claim_turn(:'u', interval '5 seconds'), interval '0', 'queues take turns apart');
RESET ROLE;
SELECT pg_sleep(0.06);
SET LOCAL ROLE pgdrain_worker;
SELECT is(outbox.claim_turn(:'q', interval '50 milliseconds'), interval '0', 'once the pause has passed, the next ask takes the turn');
RESET ROLE;

SELECT setval(('outbox.claim_turn_q' || :'qid')::regclass, 1, false) IS NULL AS _ \gset
SELECT is(pg_sequence_last_value(('outbox.claim_turn_q' || :'qid')::regclass), NULL,
          'a turn reset as by crash recovery has no last value');
SET LOCAL ROLE pgdrain_worker;
SELECT is(outbox.claim_turn(:'q', interval '5 seconds'), interval '0', 'after a crash reset the first to ask takes the turn');
SELECT ok(outbox.claim_turn(:'q', interval '5 seconds') BETWEEN interval '4 seconds' AND interval '5 seconds',
          'and the turn paces the next ask again');
RESET ROLE;

SELECT pg_sequence_last_value(('outbox.claim_turn_q' || :'qid')::regclass) AS turn \gset
SELECT throws_ok(format($$SELECT outbox.claim_turn(%L, NULL)$$, :'q'), '22023',
  'claim_turn: pause must be positive and at most 10 seconds, got NULL', 'a NULL pause is refused');
SELECT throws_ok(format($$SELECT outbox.claim_turn(%L, interval '0')$$, :'q'), '22023',
  'claim_turn: pause must be positive and at most 10 seconds, got 00:00:00', 'a pause of zero is refused');
SELECT throws_ok(format($$SELECT outbox.claim_turn(%L, interval '11 seconds')$$, :'q'), '22023',
  'claim_turn: pause must be positive and at most 10 seconds, got 00:00:11', 'a pause over 10 seconds is refused');
SELECT throws_ok($$SELECT outbox.claim_turn('public.no_such_queue', interval '1 second')$$, '42P01', NULL,
  'a queue that is not registered is refused');
SELECT is(pg_sequence_last_value(('outbox.claim_turn_q' || :'qid')::regclass), :'turn'::bigint,
          'refused calls leave the turn as it was');

SELECT format('DROP SEQUENCE outbox.claim_turn_q%s', :'uid') AS drop_turn \gset
:drop_turn;
SELECT is(outbox.claim_turn(:'u', interval '5 seconds') + outbox.claim_turn(:'u', interval '5 seconds'), interval '0',
          'a queue without its claim turn always answers 0');

SELECT outbox.drop_queue(:'q', true) IS NULL AS _ \gset
SELECT is(to_regclass('outbox.claim_turn_q' || :'qid'), NULL, 'drop_queue drops the claim turn');

SELECT * FROM finish();
ROLLBACK;
