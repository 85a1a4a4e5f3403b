-- An operator ends a stuck lease: the row is claimable at once, with a new token; the old holder's
-- result is refused and changes nothing. A row that is not leased is left alone.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 1, 'a') AS a \gset
SELECT id, lease_token AS old FROM outbox.claim_batch(:'q', 1, lease => '1 hour') \gset
SELECT ok(outbox.release_lease(:'q', :id), 'release_lease ends the lease');
SELECT results_eq(format($$SELECT id, lease_token <> %L FROM outbox.claim_batch(%L, 1)$$, :'old', :'q'),
  format($$VALUES (%s::bigint, true)$$, :id), 'the row is claimed again at once, with a new token');
SELECT test_helpers.state(:'q') AS before \gset
SELECT ok(NOT outbox.apply_result(:'q', :id, :'old', 'sent'), 'the old holder''s result is refused');
SELECT is(test_helpers.state(:'q'), :'before', 'and changed nothing');
SELECT test_helpers.add(:'q', 1, 'b') AS b \gset
SELECT ok(NOT outbox.release_lease(:'q', (:'b'::bigint[])[1]), 'a row that is not leased: false');
SELECT throws_ok(format($$SELECT outbox.release_lease(%L, NULL)$$, :'q'), '22023',
  'release_lease: id must not be NULL', 'a NULL id is refused');

SELECT * FROM finish();
ROLLBACK;
