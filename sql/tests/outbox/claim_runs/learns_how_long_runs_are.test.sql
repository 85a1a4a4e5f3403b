-- A session's claims learn how many rows a head brings (the run_rows hint, outbox._claim): runs
-- shorter than run_length do not make every claim search heads, lease and extend runs twice.
BEGIN;
SELECT plan(5);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'k' || g) FROM generate_series(1, 12) g;
SET LOCAL track_functions = 'pl';

-- The first claim knows nothing: it asks for one head (run_length 8), finds a run of 2, and asks
-- again for the rest.
SELECT is((SELECT count(*) FROM outbox.claim_runs(:'q', 8, '30 seconds', 8)), 8::bigint, 'the first claim takes 8 rows');
SELECT is((SELECT calls FROM pg_stat_xact_user_functions WHERE schemaname = 'outbox' AND funcname = '_claim_run'),
          2::bigint, 'in two passes');
SELECT ok(NULLIF(split_part(current_setting('pgdrain.run_rows_' || (SELECT queue_id FROM outbox.queues WHERE queue = :'q'), true), ',', 1), '')::numeric
          BETWEEN 2 AND 2.5, 'and remembers runs of about 2 rows');

-- The next claim of the session asks for four heads at once.
SELECT is((SELECT count(*) FROM outbox.claim_runs(:'q', 8, '30 seconds', 8)), 8::bigint, 'the second claim takes 8 rows');
SELECT is((SELECT calls FROM pg_stat_xact_user_functions WHERE schemaname = 'outbox' AND funcname = '_claim_run'),
          3::bigint, 'in one pass');

SELECT * FROM finish();
ROLLBACK;
