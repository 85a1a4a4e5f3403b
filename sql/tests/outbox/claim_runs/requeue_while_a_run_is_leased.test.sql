-- A poisoned row requeued while the rows after it are leased as a run goes to the end of its
-- partition (requeue_poisoned gives it a new id): it is not claimed beside the run in flight, and
-- it is claimed once the run's results are recorded. Per-key order holds across an operator's
-- requeue racing a run.
BEGIN;
SELECT plan(5);

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 3, 'a') AS a \gset
SELECT format($$UPDATE %s SET attempt_count = 3, last_error = 'poisoned' WHERE id = %s$$,
              :'q', (:'a'::bigint[])[1]) AS poison \gset
:poison;
SELECT results_eq(format('SELECT id FROM outbox.claim_runs(%L, 100, %L, 10)', :'q', '30 seconds'),
  format('VALUES (%s::bigint), (%s)', (:'a'::bigint[])[2], (:'a'::bigint[])[3]),
  'the run steps over the poisoned row');

SELECT is(outbox.requeue_poisoned(:'q'), 1::bigint, 'the operator requeues the poisoned row');
SELECT is_empty(format('SELECT id FROM outbox.claim_runs(%L, 100, %L, 10)', :'q', '30 seconds'),
  'the requeued row is not claimed while the run is in flight');

SELECT results_eq(format($$SELECT count(*) FILTER (WHERE applied) FROM outbox.apply_results(%1$L,
                  (SELECT array_agg(id ORDER BY id) FROM %2$s WHERE lease_token IS NOT NULL),
                  (SELECT array_agg(lease_token ORDER BY id) FROM %2$s WHERE lease_token IS NOT NULL),
                  ARRAY['sent', 'sent'])$$, :'q', :'q'),
  'VALUES (2::bigint)', 'the run is recorded');
SELECT results_eq(format('SELECT id > %s FROM outbox.claim_runs(%L, 100, %L, 10)', (:'a'::bigint[])[3], :'q', '30 seconds'),
  'VALUES (true)', 'then the requeued row is claimed, after the run (its new id is above the run''s)');

SELECT * FROM finish();
ROLLBACK;
