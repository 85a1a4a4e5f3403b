-- create_queue run again makes the queue's late-rows function again in place (CREATE OR REPLACE,
-- same oid): a producer's commit step running it meanwhile keeps working. Dropped and made again,
-- as before, such a commit step failed with "cache lookup failed for function" (XX000), seen when
-- create_queue ran again beside producers. A late-rows function of another name (another table,
-- an older version) is dropped.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT p.oid AS late_oid FROM pg_proc p
WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || :qid || '\_late\_%' \gset
SELECT format('CREATE FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) RETURNS bigint[] LANGUAGE sql AS %L',
              '_q' || :qid || '_late_0123456789abcdef', 'SELECT NULL::bigint[]') \gexec

SELECT outbox.create_queue(:'q', 'k');
SELECT is((SELECT p.oid FROM pg_proc p
           WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || :qid || '\_late\_%'
             AND p.proname <> '_q' || :qid || '_late_0123456789abcdef'), :'late_oid'::oid,
          'the late-rows function is the same function after create_queue ran again');
SELECT is(to_regproc('outbox._q' || :qid || '_late_0123456789abcdef'), NULL, 'one of another name is dropped');
SELECT is((SELECT count(*) FROM pg_proc p
           WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || :qid || '\_late\_%'),
          1::bigint, 'one late-rows function is left');

SELECT * FROM finish();
ROLLBACK;
