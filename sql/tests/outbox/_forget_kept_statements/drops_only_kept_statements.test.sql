-- outbox._forget_kept_statements drops the kept statements of every queue (outbox._prepared's
-- _q<id>_<hash> functions), which the next call makes again, and nothing else a queue was given
-- (its heads trigger function, its late-rows function).
BEGIN;
SELECT plan(5);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
CREATE FUNCTION pg_temp.kept() RETURNS bigint LANGUAGE sql AS $$
  SELECT count(*) FROM pg_proc p
  WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ ('^_q' || current_setting('t.qid') || '_[0-9a-f]{24}$')
$$;
SELECT set_config('t.qid', :'qid', false);
CREATE TEMP TABLE c1 AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT cmp_ok(pg_temp.kept(), '>=', 2::bigint, 'a claim kept its statements');

SELECT cmp_ok(outbox._forget_kept_statements(), '>=', 2, 'dropped, and counted');
SELECT is(pg_temp.kept(), 0::bigint, 'none is left');
SELECT is((SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace
           AND (p.proname = 'tg_queue__heads_q' || :qid OR p.proname LIKE '\_q' || :qid || '\_late\_%')),
          2::bigint, 'the heads trigger and late-rows functions stay');
SELECT is((SELECT count(*)::int FROM outbox.apply_results(:'q', (SELECT array_agg(id) FROM c1),
             (SELECT array_agg(lease_token) FROM c1), (SELECT array_agg('sent'::text) FROM c1)) r WHERE r.applied), 1,
          'the next call makes what it needs again');

SELECT * FROM finish();
ROLLBACK;
