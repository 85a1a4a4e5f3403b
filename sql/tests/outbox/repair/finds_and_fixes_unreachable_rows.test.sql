-- outbox.repair checks the partition heads (a cache) against the queue table: a key with a
-- deliverable row but no head, a floor above the first deliverable row, a head parked past its
-- row's due time. dry_run reports and changes nothing; otherwise each is fixed, counted in
-- outbox.repairs, and the rows are claimable again. A healthy queue reports nothing.
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 2, 'missing') AS m \gset
SELECT test_helpers.add(:'q', 2, 'floored') AS f \gset
SELECT test_helpers.add(:'q', 1, 'parked') AS p \gset
SELECT test_helpers.add(:'q', 1, 'healthy') AS h \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;  -- what COMMIT would do: heads for the new keys
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;

SELECT is_empty(format('SELECT * FROM outbox.repair(%L)', :'q'), 'a healthy queue has nothing to repair');

-- The damage a bug could leave behind.
DELETE FROM outbox.partition_heads WHERE queue_id = :qid AND partition_key = 'missing';
UPDATE outbox.partition_heads SET floor_id = (:'f'::bigint[])[2] WHERE queue_id = :qid AND partition_key = 'floored';
UPDATE outbox.partition_heads SET parked_until = now() + interval '1 hour' WHERE queue_id = :qid AND partition_key = 'parked';
SELECT test_helpers.state(:'q') AS before \gset

SELECT results_eq(format('SELECT partition_key, cause FROM outbox.repair(%L, dry_run => true)', :'q'),
  $$VALUES ('floored'::text, 'floor_above_row'::text), ('missing', 'missing_head'), ('parked', 'parked_past_due')$$,
  'dry_run reports each unreachable row with its cause');
SELECT is(test_helpers.state(:'q'), :'before', 'dry_run changes nothing');
SELECT is_empty('SELECT * FROM outbox.repairs', 'dry_run counts nothing');

SELECT results_eq(format('SELECT partition_key, cause FROM outbox.repair(%L)', :'q'),
  $$VALUES ('floored'::text, 'floor_above_row'::text), ('missing', 'missing_head'), ('parked', 'parked_past_due')$$,
  'repair reports what it fixed');
SELECT results_eq(format('SELECT cause, repairs FROM outbox.repairs WHERE queue = %L ORDER BY 1', :'q'),
  $$VALUES ('floor_above_row'::text, 1::bigint), ('missing_head', 1), ('parked_past_due', 1)$$,
  'every repair is counted per cause');
SELECT is_empty(format('SELECT * FROM outbox.repair(%L)', :'q'), 'after a repair there is nothing left to repair');
SELECT results_eq(format('SELECT partition_key, id FROM outbox.claim_batch(%L, 10) ORDER BY 1', :'q'),
  format('VALUES (%L::text, %s::bigint), (%L, %s), (%L, %s), (%L, %s)', 'floored', (:'f'::bigint[])[1],
         'healthy', (:'h'::bigint[])[1], 'missing', (:'m'::bigint[])[1], 'parked', (:'p'::bigint[])[1]),
  'the repaired partitions'' first rows are claimable again');
SELECT throws_ok(format('SELECT * FROM outbox.repair(%L, NULL)', :'q'), '22023', 'repair: dry_run must not be NULL',
  'repair rejects a NULL dry_run');

SELECT * FROM finish();
ROLLBACK;
