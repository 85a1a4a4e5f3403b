-- claim_batch leases in attempt_count, id order: fresh rows overtake retried ones (unpartitioned).
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 3) AS old \gset

-- The first row fails once (transient) and its backoff ends; then two fresh rows arrive.
SELECT lease_token AS tok FROM outbox.claim_batch(:'q', 1) \gset
SELECT ok(outbox.apply_result(:'q', (:'old'::bigint[])[1], :'tok', 'transient', 'timeout'),
          'the first row fails once');
SELECT is(test_helpers.end_backoff(:'q'), 1::bigint, 'its backoff ends');
SELECT test_helpers.add(:'q', 2) AS fresh \gset

SELECT results_eq(
  format('SELECT id, attempt_count FROM outbox.claim_batch(%L, 3)', :'q'),
  format($$VALUES (%s::bigint, 0), (%s, 0), (%s, 0)$$, (:'old'::bigint[])[2], (:'old'::bigint[])[3], (:'fresh'::bigint[])[1]),
  'a batch takes fresh rows (attempt_count 0) by id before the retried row, even when the retried row is older');
SELECT results_eq(
  format('SELECT id, attempt_count FROM outbox.claim_batch(%L, 10)', :'q'),
  format($$VALUES (%s::bigint, 0), (%s, 1)$$, (:'fresh'::bigint[])[2], (:'old'::bigint[])[1]),
  'the retried row comes after the remaining fresh row');
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'q'),
                'with every row leased there is nothing left to claim');

-- Order among retried rows is by attempt_count, then id.
SELECT test_helpers.new_queue() AS q2 \gset
SELECT test_helpers.add(:'q2', 4) AS r \gset
SELECT format($$UPDATE %s SET attempt_count = CASE id WHEN %s THEN 3 WHEN %s THEN 1 WHEN %s THEN 2 ELSE 1 END$$,
              :'q2', (:'r'::bigint[])[1], (:'r'::bigint[])[2], (:'r'::bigint[])[3]) AS ddl \gset
:ddl;
SELECT results_eq(
  format('SELECT id FROM outbox.claim_batch(%L, 10)', :'q2'),
  format($$VALUES (%s::bigint), (%s), (%s), (%s)$$, (:'r'::bigint[])[2], (:'r'::bigint[])[4], (:'r'::bigint[])[3], (:'r'::bigint[])[1]),
  'rows come back ordered by attempt_count, then id');

SELECT * FROM finish();
ROLLBACK;
