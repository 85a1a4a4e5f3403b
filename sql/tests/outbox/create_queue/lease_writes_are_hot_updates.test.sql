-- A table made by create_queue leaves room on its pages (fillfactor 50) for the version a lease
-- writes next to each row, so a claim's lease writes are HOT updates that touch no index: a row is
-- written twice (leased, then sent), and at fillfactor 80 most lease writes of a drain found no room
-- (10-23% of a drain's updates were HOT, 47-48% at 50, of the 50% that can be).
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT ok((SELECT 'fillfactor=50' = ANY (reloptions) FROM pg_class WHERE oid = :'q'::regclass),
          'a created table has fillfactor 50');

-- 300 keys with one row each, their heads made now.
SELECT count(*) FROM (SELECT test_helpers.add(:'q', 1, 'k' || g) FROM generate_series(1, 300) g) s;
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT n_tup_upd AS upd0, n_tup_hot_upd AS hot0 FROM pg_stat_xact_user_tables WHERE relid = :'q'::regclass \gset

SELECT is((SELECT count(*)::int FROM outbox.claim_batch(:'q', 300)), 300, 'one claim leases every head');
SELECT is((SELECT n_tup_upd - :upd0 FROM pg_stat_xact_user_tables WHERE relid = :'q'::regclass), 300::bigint,
          'each lease is one update');
-- Every row of a page leased at once is the worst case (a drain's sent versions die and are pruned
-- as it goes): 247 of 300 here, 68 at fillfactor 80, all 300 at 40.
SELECT cmp_ok((SELECT n_tup_hot_upd - :hot0 FROM pg_stat_xact_user_tables WHERE relid = :'q'::regclass), '>=', 240::bigint,
              'and at least four in five of them are HOT updates');

SELECT * FROM finish();
ROLLBACK;
