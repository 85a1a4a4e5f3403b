-- poisoned_rows pages newest first, below before_id: every poisoned row comes once, also when they
-- do not share one attempt_count (rows poisoned before max_attempts was lowered keep their larger
-- count). Ordered by (attempt_count, id) the row poisoned after the change came first in no page
-- and was skipped by every page below it: pgdrain poisoned and requeue --key did not see it.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue('k', 10) AS q \gset
SELECT test_helpers.add(:'q', 5, 'a') AS old_ids \gset
SELECT format('UPDATE %s SET attempt_count = 10', :'q') \gexec
SELECT outbox.create_queue(:'q', 'k', 3);
SELECT test_helpers.add(:'q', 1, 'victim') AS new_ids \gset
SELECT format('UPDATE %s SET attempt_count = 3 WHERE id = %s', :'q', (:'new_ids'::bigint[])[1]) \gexec

SELECT is((SELECT array_agg(id) FROM outbox.poisoned_rows(:'q', 2)),
          ARRAY[(:'new_ids'::bigint[])[1], (:'old_ids'::bigint[])[5]], 'the first page is the two newest');
SELECT is((SELECT array_agg(id) FROM outbox.poisoned_rows(:'q', 2, (:'old_ids'::bigint[])[5])),
          ARRAY[(:'old_ids'::bigint[])[4], (:'old_ids'::bigint[])[3]], 'the next page goes on below the last id');
SELECT is((SELECT array_agg(id ORDER BY id) FROM outbox.poisoned_rows(:'q', 1000)),
          (:'old_ids'::bigint[]) || (:'new_ids'::bigint[]), 'one page of all lists each poisoned row once');

SELECT * FROM finish();
ROLLBACK;
