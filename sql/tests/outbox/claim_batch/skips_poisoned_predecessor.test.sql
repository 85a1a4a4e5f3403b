-- A poisoned row does not block its partition: the next row becomes the head.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 3, 'a') AS a \gset

SELECT lease_token AS t FROM outbox.claim_batch(:'q', 10) \gset
SELECT ok(outbox.apply_result(:'q', (:'a'::bigint[])[1], :'t', 'permanent', 'bad payload'),
          'the head fails permanently');
SELECT is(test_helpers.ids_where(:'q', 'attempt_count = 3'), ARRAY[(:'a'::bigint[])[1]], 'the head is poisoned');
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'q'),
  format('VALUES (%s::bigint)', (:'a'::bigint[])[2]),
  'claim_batch skips the poisoned predecessor and takes the next row of the partition');

-- A row poisoned behind the drainer's back (e.g. adopted data) is skipped too.
SELECT test_helpers.new_queue('k', max_attempts => 3) AS q2 \gset
SELECT format($$INSERT INTO %s (event_type, payload, k, attempt_count, last_error) VALUES
                 ('p1', '{}', 'a', 3, 'old poison'), ('p2', '{}', 'a', 5, 'older poison'), ('ok', '{}', 'a', 0, NULL)$$,
              :'q2') AS ddl \gset
:ddl;
SELECT results_eq(format('SELECT event_type FROM outbox.claim_batch(%L, 10)', :'q2'),
  $$VALUES ('ok'::text)$$,
  'rows inserted already poisoned (attempt_count >= max_attempts) do not block the partition');
SELECT is(test_helpers.ids_where(:'q2', $$event_type IN ('p1', 'p2') AND lease_token IS NULL$$),
          test_helpers.ids_where(:'q2', $$event_type IN ('p1', 'p2')$$),
          'poisoned rows are never leased');

-- A sent predecessor does not block either.
SELECT test_helpers.new_queue('k') AS q3 \gset
SELECT format($$INSERT INTO %s (event_type, payload, k, sent_at) VALUES ('done', '{}', 'a', now()), ('next', '{}', 'a', NULL)$$,
              :'q3') AS ddl \gset
:ddl;
SELECT results_eq(format('SELECT event_type FROM outbox.claim_batch(%L, 10)', :'q3'),
  $$VALUES ('next'::text)$$, 'a sent predecessor does not block its successor');

SELECT * FROM finish();
ROLLBACK;
