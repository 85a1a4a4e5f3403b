-- release_lease with leased_until ends only the lease that ends then, the one the operator saw:
-- after that lease ran out and a healthy worker claimed the row, the call changes nothing and says
-- false (without it, the healthy worker's lease was ended and its row delivered twice at once).
-- The lease it names is ended as before; an infinite leased_until is refused.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 1, 'a') AS a \gset
SELECT id, leased_until AS seen FROM outbox.claim_batch(:'q', 1, lease => '1 hour') \gset
-- The lease the operator saw runs out; a healthy worker takes the row.
SELECT test_helpers.expire_leases(:'q') AS _ \gset
SELECT lease_token AS healthy, leased_until AS healthy_until FROM outbox.claim_batch(:'q', 1, lease => '1 hour') \gset
SELECT test_helpers.state(:'q') AS before \gset
SELECT ok(NOT outbox.release_lease(:'q', :id, :'seen'), 'the lease seen is over: false');
SELECT is(test_helpers.state(:'q'), :'before', 'and the healthy worker''s lease stands');
SELECT ok(outbox.apply_result(:'q', :id, :'healthy', 'transient', 'later'), 'whose result still counts');

SELECT test_helpers.add(:'q', 1, 'b') AS b \gset
SELECT id AS b_id, leased_until AS b_seen FROM outbox.claim_batch(:'q', 1, lease => '1 hour') \gset
SELECT ok(outbox.release_lease(:'q', :b_id, :'b_seen'), 'the lease it names is ended');
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 1)', :'q'), format('VALUES (%s::bigint)', :b_id),
  'and the row is claimable at once');
SELECT throws_ok(format($$SELECT outbox.release_lease(%L, 1, 'infinity')$$, :'q'), '22023',
  'release_lease: leased_until must be a finite time (NULL: whatever lease the row has)', 'an infinite leased_until is refused');

SELECT * FROM finish();
ROLLBACK;
