-- A run is unbroken: it ends before the first following row that is not due or is leased, so the
-- rows it returns are exactly the next ones its partition delivers. Poisoned rows are no part of
-- the order and are stepped over, as the FIFO rule does.
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 4, 'a') AS a \gset
SELECT format($$UPDATE %s SET next_attempt_at = now() + interval '1 hour' WHERE id = %s$$,
              :'q', (:'a'::bigint[])[3]) AS ddl \gset
:ddl;
SELECT results_eq(format('SELECT id FROM outbox.claim_runs(%L, 100, %L, 10)', :'q', '30 seconds'),
  format('VALUES (%s::bigint), (%s)', (:'a'::bigint[])[1], (:'a'::bigint[])[2]),
  'the run ends before a row that is not due yet (a deliver_at in the future)');
SELECT is(test_helpers.ids_where(:'q', 'lease_token IS NOT NULL'), (:'a'::bigint[])[1:2],
          'nothing after it is leased');

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q2 \gset
SELECT test_helpers.add(:'q2', 4, 'a') AS b \gset
SELECT format($$UPDATE %1$s SET attempt_count = 3, last_error = 'poisoned' WHERE id = %2$s;
                UPDATE %1$s SET lease_token = gen_random_uuid(), leased_until = now() + interval '1 minute' WHERE id = %3$s$$,
              :'q2', (:'b'::bigint[])[2], (:'b'::bigint[])[4]) AS ddl2 \gset
:ddl2;
SELECT results_eq(format('SELECT id FROM outbox.claim_runs(%L, 100, %L, 10)', :'q2', '30 seconds'),
  format('VALUES (%s::bigint), (%s)', (:'b'::bigint[])[1], (:'b'::bigint[])[3]),
  'a poisoned row is stepped over; the run ends before a row another lease holds');
SELECT is(test_helpers.ids_where(:'q2', 'attempt_count = 3 AND lease_token IS NULL'), ARRAY[(:'b'::bigint[])[2]],
          'the poisoned row is not leased');

SELECT * FROM finish();
ROLLBACK;
