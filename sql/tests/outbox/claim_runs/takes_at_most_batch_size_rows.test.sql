-- batch_size bounds the rows of a claim, runs included: partitions with long runs take fewer
-- heads, and the last run is cut short rather than the batch exceeded.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 3, 'a') AS a, test_helpers.add(:'q', 3, 'b') AS b, test_helpers.add(:'q', 3, 'c') AS c \gset
SELECT results_eq(format('SELECT id FROM outbox.claim_runs(%L, 4, %L, 3)', :'q', '30 seconds'),
  format('VALUES (%s::bigint), (%s), (%s), (%s)', (:'a'::bigint[])[1], (:'a'::bigint[])[2], (:'a'::bigint[])[3], (:'b'::bigint[])[1]),
  'four rows: a''s run whole and b''s head');
SELECT results_eq(format('SELECT id FROM outbox.claim_runs(%L, 10, %L, 3)', :'q', '30 seconds'),
  format('VALUES (%s::bigint), (%s), (%s)', (:'c'::bigint[])[1], (:'c'::bigint[])[2], (:'c'::bigint[])[3]),
  'the next claim takes c''s run (b''s head is in flight)');

-- One row per partition: claim_runs with run_length 1 claims what claim_batch claims.
SELECT test_helpers.new_queue('k') AS q2 \gset
SELECT test_helpers.add(:'q2', 2, 'a') AS d, test_helpers.add(:'q2', 2, 'b') AS e \gset
SELECT results_eq(format('SELECT id FROM outbox.claim_runs(%L, 10, %L, 1)', :'q2', '30 seconds'),
  format('VALUES (%s::bigint), (%s)', (:'d'::bigint[])[1], (:'e'::bigint[])[1]),
  'run_length 1 takes each partition''s head only');

SELECT * FROM finish();
ROLLBACK;
