-- An event's identity is its event_id: generated unless given, returned by enqueue_event, handed
-- to workers by both claim modes with the event's headers, kept when a requeue moves the row to a
-- new id. deliver_at holds the first attempt back. Bad headers or deliver_at change nothing.
BEGIN;
SELECT plan(12);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT id AS id1, event_id AS e1 FROM outbox.enqueue_event(:'q', 'e', '{}', 'a', headers => '{"traceparent": "00-abc-def-01"}') \gset
SELECT id AS id2, event_id AS e2 FROM outbox.enqueue_event(:'q', 'e', '{}', 'b',
  event_id => '6f1c7a52-3b7e-4f6e-9d2a-0c5b8e1f2a3d') \gset
SELECT isnt(:'e1'::uuid, NULL, 'enqueue_event returns a generated event_id');
SELECT is(:'e2'::uuid, '6f1c7a52-3b7e-4f6e-9d2a-0c5b8e1f2a3d'::uuid, 'and keeps one the producer gives');
SELECT results_eq(format($$SELECT id, event_id, headers FROM outbox.claim_batch(%L, 10) ORDER BY id$$, :'q'),
  format($$VALUES (%s::bigint, %L::uuid, '{"traceparent": "00-abc-def-01"}'::jsonb), (%s, %L, NULL)$$,
         :'id1', :'e1', :'id2', :'e2'),
  'claim_batch hands each row''s event_id and headers to the worker');

BEGIN;
SELECT test_helpers.expire_leases(:'q') AS _ \gset
SELECT results_eq(format($$SELECT event_id FROM outbox.claim_locked(%L, 10) ORDER BY id$$, :'q'),
  format($$VALUES (%L::uuid), (%L::uuid)$$, :'e1', :'e2'), 'claim_locked hands out the same event_ids');
SELECT outbox.settle_locked(:'q', ARRAY[:id1, :id2]::bigint[], ARRAY['permanent', 'sent']) AS _ \gset
SELECT is(outbox.requeue_poisoned(:'q'), 1::bigint, 'the poisoned row is requeued to the tail of its key');
SELECT results_eq(format($$SELECT id > %s, event_id FROM %s WHERE k = 'a'$$, :'id1', :'q'),
  format($$VALUES (true, %L::uuid)$$, :'e1'), 'under a new id, with the same event_id');

SELECT outbox.enqueue(:'q', 'later', '{}', 'c', deliver_at => clock_timestamp() + interval '1 hour') AS id3 \gset
SELECT is_empty(format($$SELECT 1 FROM outbox.claim_batch(%L, 10) WHERE partition_key = 'c'$$, :'q'),
  'an event with deliver_at an hour away is not claimed now');
SELECT test_helpers.end_backoff(:'q') AS _ \gset
SELECT test_helpers.wake_heads(:'q') AS _ \gset
SELECT results_eq(format($$SELECT id FROM outbox.claim_batch(%L, 10) WHERE partition_key = 'c'$$, :'q'),
  format('VALUES (%s::bigint)', :'id3'), 'and is claimed once that time has come');

SELECT test_helpers.state(:'q') AS before \gset
SELECT throws_ok(format($$SELECT outbox.enqueue(%L, 'e', '{}', 'd', headers => '{"n": 1}')$$, :'q'), '22023',
  'enqueue: headers must be NULL or a JSON object whose values are strings, got {"n": 1}', 'headers must be strings');
SELECT throws_ok(format($$SELECT * FROM outbox.enqueue_event(%L, 'e', '{}', 'd', headers => '[]')$$, :'q'), '22023',
  'enqueue_event: headers must be NULL or a JSON object whose values are strings, got []', 'headers must be an object');
SELECT throws_ok(format($$SELECT outbox.enqueue(%L, 'e', '{}', 'd', deliver_at => 'infinity')$$, :'q'), '22023',
  'enqueue: deliver_at must be a finite time (NULL: deliver now)', 'deliver_at must be finite');
SELECT is(test_helpers.state(:'q'), :'before', 'a refused enqueue changes nothing');

SELECT * FROM finish();
ROLLBACK;
