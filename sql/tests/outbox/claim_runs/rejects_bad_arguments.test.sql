-- claim_runs names the argument and the rule it broke, and a refused call leases nothing.
BEGIN;
SELECT plan(5);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
SELECT throws_ok(format('SELECT * FROM outbox.claim_runs(%L, 10, %L, 0)', :'q', '30 seconds'), '22023',
  'claim_runs: run_length must be between 1 and 1000, got 0', 'a run_length of 0 is refused');
SELECT throws_ok(format('SELECT * FROM outbox.claim_runs(%L, 10, %L, 1001)', :'q', '30 seconds'), '22023',
  'claim_runs: run_length must be between 1 and 1000, got 1001', 'a run_length above 1000 is refused');
SELECT throws_ok(format('SELECT * FROM outbox.claim_runs(%L, 10, %L, NULL)', :'q', '30 seconds'), '22023',
  'claim_runs: run_length must be between 1 and 1000, got NULL', 'a NULL run_length is refused');
SELECT throws_ok(format('SELECT * FROM outbox.claim_locked_runs(%L, 0, 2)', :'q'), '22023',
  'claim_locked_runs: batch_size must be between 1 and 10000, got 0', 'claim_locked_runs names itself');
SELECT is(test_helpers.ids_where(:'q', 'lease_token IS NOT NULL'), '{}'::bigint[], 'nothing was leased');

SELECT * FROM finish();
ROLLBACK;
