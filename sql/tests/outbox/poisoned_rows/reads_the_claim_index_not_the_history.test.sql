-- poisoned_rows reads a page through the claim index, one backward scan per attempt count present
-- among poisoned rows, and never walks the sent rows: with 20,000 rows sent after 2,000 poisoned
-- ones, a page of 50 fetches a few hundred blocks (ordered by id over all of them, the planner
-- walked the primary key backwards through every sent row: thousands). Rows of several attempt
-- counts (a max_attempts lowered since) merge newest first, across pages too; a payload that may be
-- large (stored in more than 64 kB, or compressed into more than 4 kB) is not read for its preview.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q \gset
SELECT format('INSERT INTO %s (event_type, payload, k, attempt_count, last_error)
               SELECT ''e'', ''{}'', ''k'' || (g %% 50), CASE WHEN g %% 97 = 0 THEN 5 ELSE 3 END, ''x''
               FROM generate_series(1, 2000) g', :'q') \gexec
SELECT format('INSERT INTO %s (event_type, payload, k, sent_at)
               SELECT ''e'', ''{}'', ''k'' || (g %% 50), now() FROM generate_series(1, 20000) g', :'q') \gexec
SELECT format('ANALYZE %s', :'q') \gexec

SELECT results_eq(format('SELECT id FROM outbox.poisoned_rows(%L, 50)', :'q'),
  format('SELECT id FROM %s WHERE sent_at IS NULL AND attempt_count >= 3 ORDER BY id DESC LIMIT 50', :'q'),
  'the newest 50 poisoned rows, attempt counts 3 and 5 merged');
SELECT results_eq(format('SELECT id FROM outbox.poisoned_rows(%L, 50, %s)', :'q',
                         (SELECT min(id) FROM outbox.poisoned_rows(:'q', 50))),
  format('SELECT id FROM %1$s WHERE sent_at IS NULL AND attempt_count >= 3
          AND id < (SELECT min(id) FROM (SELECT id FROM %1$s WHERE sent_at IS NULL AND attempt_count >= 3 ORDER BY id DESC LIMIT 50) s)
          ORDER BY id DESC LIMIT 50', :'q'),
  'the next page goes on below the first');

-- Blocks of the table and its indexes read by one page, from this transaction's counters.
CREATE FUNCTION pg_temp.blocks(p_table regclass) RETURNS bigint LANGUAGE sql AS $$
  SELECT sum(pg_stat_get_xact_blocks_fetched(c.oid))::bigint FROM pg_class c
  WHERE c.oid = p_table OR c.oid IN (SELECT i.indexrelid FROM pg_index i WHERE i.indrelid = p_table);
$$;
SELECT pg_temp.blocks(:'q') AS before \gset
SELECT count(*) AS _ FROM outbox.poisoned_rows(:'q', 50) \gset
SELECT cmp_ok(pg_temp.blocks(:'q') - :before, '<', 500::bigint,
  'a page of 50 reads a few hundred blocks, not the 20,000 sent rows');

SELECT format('INSERT INTO %s (event_type, payload, k, attempt_count, last_error)
               SELECT ''big'', jsonb_build_object(''blob'', string_agg(md5(g::text), '''')), ''big'', 3, ''x''
               FROM generate_series(1, 20000) g', :'q') \gexec
SELECT ok((SELECT payload_preview FROM outbox.poisoned_rows(:'q', 1)) ~ '^\(a payload of \d+ bytes stored: not shown\)$',
  'a payload stored in more than 64 kB is not read for its preview');
-- 10 MB of text compressed into a few dozen kB: not read either.
SELECT format('INSERT INTO %s (event_type, payload, k, attempt_count, last_error)
               VALUES (''compressed'', jsonb_build_object(''blob'', repeat(''abcdefgh'', 1250000)), ''compressed'', 3, ''x'')', :'q') \gexec
SELECT ok((SELECT payload_preview FROM outbox.poisoned_rows(:'q', 1)) ~ '^\(a payload of \d+ bytes stored: not shown\)$',
  'a payload compressed into more than 4 kB is not read for its preview');
SELECT format('INSERT INTO %s (event_type, payload, k, attempt_count, last_error)
               VALUES (''small'', ''{"a": 1}'', ''small'', 3, ''x'')', :'q') \gexec
SELECT is((SELECT payload_preview FROM outbox.poisoned_rows(:'q', 1)), '{"a": 1}', 'a small payload is previewed');
SELECT is((SELECT count(*)::int FROM outbox.poisoned_rows(:'q', 1000)), 1000, 'a page of 1000');

SELECT * FROM finish();
ROLLBACK;
