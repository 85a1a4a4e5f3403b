-- The commit step's late-rows statement runs in a function made for the queue
-- (outbox._late_rows_function), named for the table and column it reads, not for the statement:
-- create_queue (and a migration's reinstall of the heads triggers) makes it again, so a statement
-- changed by a migration replaces the one an older version made.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT p.oid::regprocedure AS late, p.prosrc AS current_source FROM pg_proc p
WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || :qid || '\_late\_%' \gset

-- What an older version would have left: the same name, another statement.
SELECT format('CREATE OR REPLACE FUNCTION %s RETURNS bigint[] LANGUAGE plpgsql STABLE SET search_path = '''' AS %L',
              :'late', 'BEGIN RETURN NULL; END') \gexec
SELECT isnt((SELECT prosrc FROM pg_proc WHERE oid = :'late'::regprocedure), :'current_source', 'an old statement in place');

SELECT outbox.create_queue(:'q', 'k');
SELECT is((SELECT p.prosrc FROM pg_proc p
           WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || :qid || '\_late\_%'),
          :'current_source', 'create_queue makes the late-rows function again with the current statement');
SELECT is((SELECT count(*) FROM pg_proc p
           WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || :qid || '\_late\_%'),
          1::bigint, 'and leaves one');

SELECT * FROM finish();
ROLLBACK;
