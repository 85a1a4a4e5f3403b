-- An operator dismisses poisoned rows for good (issue 30, item 3): dismiss_poisoned keeps them as
-- history (sent_at set, last_error says who and why), counted neither as poisoned nor as pending,
-- never listed by poisoned_rows nor brought back by requeue_poisoned. Fenced: a row that is not
-- poisoned (any more) is not taken. Logged (operator_log).
BEGIN;
SELECT plan(10);

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 2, 'x') AS x \gset
SELECT test_helpers.add(:'q', 1, 'y') AS y \gset
SELECT (:'x'::bigint[])[1] AS p1, (:'y'::bigint[])[1] AS p2, (:'x'::bigint[])[2] AS pending \gset
SELECT count(*) AS _ FROM outbox.claim_batch(:'q', 10) c
WHERE outbox.apply_result(:'q', c.id, c.lease_token, 'permanent', '400') \gset
SELECT results_eq(format('SELECT poisoned, pending FROM outbox.stats(%L)', :'q'), $$VALUES (2::bigint, 1::bigint)$$,
  'two rows are poisoned, one pending');

SELECT session_user::text AS me \gset
SET LOCAL ROLE pgdrain_operator;
SELECT is(outbox.dismiss_poisoned(:'q', ARRAY[:p1, :pending], 'customer deleted'), 1::bigint,
          'pgdrain_operator dismisses the poisoned row; the pending one is not taken');
RESET ROLE;
SELECT results_eq(format('SELECT poisoned, pending FROM outbox.stats(%L)', :'q'), $$VALUES (1::bigint, 1::bigint)$$,
  'the dismissed row counts neither as poisoned nor as pending');
SELECT results_eq(format('SELECT sent_at IS NOT NULL, attempt_count, last_error FROM %s WHERE id = %s', :'q', :p1),
  format($$VALUES (true, 3, %L::text)$$, 'dismissed by ' || :'me' || ': customer deleted (last error: 400)'),
  'it is kept as history: sent_at set, who and why in last_error, its error kept');
SELECT results_eq(format('SELECT id FROM outbox.poisoned_rows(%L)', :'q'), format('VALUES (%s::bigint)', :p2),
  'poisoned_rows no longer lists it');
SELECT is(outbox.dismiss_poisoned(:'q', ARRAY[:p1], 'again'), 0::bigint, 'dismissing it again takes nothing');
SELECT is(outbox.requeue_poisoned(:'q'), 1::bigint, 'requeue_poisoned brings back only the other poisoned row');
SELECT results_eq(format('SELECT action, id, partition_key, attempt_count, reason FROM outbox.operator_log(%L)', :'q'),
  format($$VALUES ('dismiss'::text, %s::bigint, 'x'::text, 3, 'customer deleted'::text)$$, :p1), 'the dismissal is logged, once');
SELECT throws_ok(format($$SELECT outbox.dismiss_poisoned(%L, NULL, 'r')$$, :'q'), '22023',
  'dismiss_poisoned: ids must have between 1 and 10000 elements, got NULL', 'ids are required (no "dismiss everything")');
SELECT throws_ok(format($$SELECT outbox.dismiss_poisoned(%L, ARRAY[%s], NULL)$$, :'q', :p2), '22023',
  'dismiss_poisoned: reason must be a non-blank text of at most 1000 characters, got NULL', 'a reason is required');

SELECT * FROM finish();
ROLLBACK;
