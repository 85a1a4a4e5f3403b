-- A second claim_locked in the same transaction returns rows it does not hold yet: the rows an
-- earlier claim_locked of the transaction holds do not take the places of claimable ones.
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue() AS u \gset
SELECT test_helpers.add(:'u', 3) AS uids \gset
SELECT test_helpers.new_queue('k') AS p \gset
SELECT test_helpers.add(:'p', 1, 'a') AS a \gset
SELECT test_helpers.add(:'p', 1, 'b') AS b \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;

SELECT results_eq(format('SELECT id FROM outbox.claim_locked(%L, 1)', :'u'), format('VALUES (%s::bigint)', (:'uids'::bigint[])[1]),
  'unpartitioned: the first claim takes the first row');
SELECT results_eq(format('SELECT id FROM outbox.claim_locked(%L, 1)', :'u'), format('VALUES (%s::bigint)', (:'uids'::bigint[])[2]),
  'unpartitioned: a second claim of one row takes the next row, not nothing');
SELECT results_eq(format('SELECT id FROM outbox.claim_locked(%L, 1)', :'p'), format('VALUES (%s::bigint)', (:'a'::bigint[])[1]),
  'partitioned: the first claim takes one head');
SELECT results_eq(format('SELECT id FROM outbox.claim_locked(%L, 1)', :'p'), format('VALUES (%s::bigint)', (:'b'::bigint[])[1]),
  'partitioned: a second claim of one row takes the other head, not nothing');

SELECT * FROM finish();
ROLLBACK;
