-- release gives a leased row back untouched (lease and token cleared, no attempt counted,
-- claimable at once) only for the token holder; otherwise false and nothing changes.
BEGIN;
SELECT plan(11);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
SELECT (:'a'::bigint[])[1] AS id \gset
SELECT lease_token AS t FROM outbox.claim_batch(:'q') \gset
SELECT test_helpers.row_json(:'q', :id) AS leased \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT is(outbox.release(:'q', :id, gen_random_uuid()), false, 'a foreign token can not release the row');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'the refused release changed nothing');
SELECT is(outbox.release(:'q', :id, :'t'), true, 'the holder releases its row');
SELECT is(test_helpers.row_json(:'q', :id), :'leased'::jsonb || '{"lease_token": null, "leased_until": null}',
          'release clears lease and token and nothing else: no attempt counted, no backoff, no error');
SELECT is(outbox.release(:'q', :id, :'t'), false, 'releasing twice is refused');
SELECT results_eq(format('SELECT id, attempt_count FROM outbox.claim_batch(%L)', :'q'), format('VALUES (%s::bigint, 0)', :id),
                  'the released head is claimable at once, before its successor');
SELECT test_helpers.state(:'q') AS before2 \gset

SELECT throws_ok(format('SELECT outbox.release(%L, %s, NULL)', :'q', :id), '22023',
  'release: lease_token must not be NULL', 'release rejects a NULL token');
SELECT throws_ok(format('SELECT outbox.release(%L, NULL, %L)', :'q', :'t'), '22023',
  'release: id must not be NULL', 'release rejects a NULL id');
SELECT throws_ok(format('SELECT outbox.release(%L, %s, %L)', 'a.b.c', :id, :'t'), '22023',
  'release: queue must be a plain name "schema.table" (letters, digits, _), got ''a.b.c''', 'release rejects a three-part name');
SELECT throws_ok(format('SELECT outbox.release(%L, %s, %L)', 'public.no_such_queue_t6', :id, :'t'), '42P01',
  'release: queue public.no_such_queue_t6 is not registered (call outbox.create_queue first)', 'release names an unknown queue');
SELECT is(test_helpers.state(:'q'), :'before2'::jsonb, 'the rejected calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
