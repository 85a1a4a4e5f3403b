-- purge_sent deletes at most max_rows rows sent longer ago than older_than, oldest ids first,
-- and never a pending row.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 6) AS r \gset
SELECT format($$UPDATE %1$s SET sent_at = now() - interval '8 days' WHERE id <= %2$s;
                UPDATE %1$s SET sent_at = now() - interval '1 day' WHERE id = %3$s$$,
              :'q', (:'r'::bigint[])[3], (:'r'::bigint[])[4]) AS ddl \gset
:ddl;
SELECT is(outbox.purge_sent(:'q', '7 days', 2), 2::bigint, 'purge_sent deletes at most max_rows rows');
SELECT is(test_helpers.ids_where(:'q', 'true'), (:'r'::bigint[])[3:6], 'the oldest ids went first');
SELECT is(outbox.purge_sent(:'q'), 1::bigint, 'the next call deletes the remaining row sent over 7 days ago');
SELECT is(outbox.purge_sent(:'q'), 0::bigint, 'then nothing is left to purge');
SELECT is(test_helpers.ids_where(:'q', 'true'), (:'r'::bigint[])[4:6], 'the recently sent and the pending rows are kept');
SELECT throws_ok(format('SELECT outbox.purge_sent(%L, %L, 0)', :'q', '1 day'), '22023',
  'purge_sent: max_rows must be between 1 and 1000000, got 0', 'purge_sent rejects max_rows 0');

SELECT * FROM finish();
ROLLBACK;
