-- The claim, record and head refresh statements of a queue run through functions that keep their
-- plans (outbox._prepared): made by the first call that needs one, named for the statement they run,
-- made again when dropped, executable by nobody but their owner, dropped by drop_queue. A session
-- that can not make one (a read-only transaction) runs the statement itself.
BEGIN;
SELECT plan(13);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
SELECT test_helpers.add(:'q', 1, 'b') AS b \gset

CREATE TEMP TABLE kept (fn regprocedure);
CREATE FUNCTION pg_temp.kept() RETURNS bigint LANGUAGE sql AS $$
  SELECT count(*) FROM pg_proc p
  WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || current_setting('t.qid') || '\_%'
$$;
SELECT set_config('t.qid', :'qid', false);

CREATE TEMP TABLE c1 AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT is((SELECT array_agg(id ORDER BY id) FROM c1), ARRAY[(:'a'::bigint[])[1], (:'b'::bigint[])[1]],
          'a claim through kept plans takes each partition''s head');
SELECT is((SELECT count(*)::int FROM outbox.apply_results(:'q', (SELECT array_agg(id) FROM c1),
             (SELECT array_agg(lease_token) FROM c1), (SELECT array_agg('sent'::text) FROM c1)) r WHERE r.applied), 2,
          'its results are recorded');
SELECT cmp_ok(pg_temp.kept(), '>=', 4::bigint, 'the claim, read-back, record and refresh statements keep their plans');
INSERT INTO kept SELECT p.oid::regprocedure FROM pg_proc p
WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || :qid || '\_%';

SELECT is_empty($$SELECT fn FROM kept k JOIN pg_proc p ON p.oid = k.fn
                  WHERE p.prosecdef OR NOT ('search_path=pg_catalog, pg_temp' = ANY (COALESCE(p.proconfig, '{}')))
                     OR EXISTS (SELECT 1 FROM aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a
                                WHERE a.grantee <> p.proowner)$$,
                'each runs as its caller, pins search_path and is executable by its owner only');

-- Left to choose, the plan cache planned a claim's read-back again on most calls (a generic plan of
-- `= ANY ($1)` looks dearer than a custom one for a short array): a kept plan must be generic.
SELECT is_empty($$SELECT fn FROM kept k JOIN pg_proc p ON p.oid = k.fn
                  WHERE p.proname NOT LIKE '\_q%\_late\_%'  -- outbox._late_rows_function's, not these
                    AND NOT ('plan_cache_mode=force_generic_plan' = ANY (COALESCE(p.proconfig, '{}')))$$,
                'each forces a generic plan, made once per session');

-- Dropped (by hand, by a restore that left it out): the next call makes it again.
DO $$ DECLARE f regprocedure; BEGIN
  FOR f IN SELECT fn FROM kept LOOP EXECUTE format('DROP FUNCTION %s', f); END LOOP; END $$;
SELECT is(pg_temp.kept(), 0::bigint, 'dropped');
CREATE TEMP TABLE c2 AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT is((SELECT array_agg(id) FROM c2), ARRAY[(:'a'::bigint[])[2]], 'a claim after the drop takes the next head');
SELECT ok(pg_temp.kept() >= 2, 'and makes its statements again');

-- The table changes under the kept plans (a column added, an index dropped and made again): the
-- plans are made again, the functions stay.
SELECT format('ALTER TABLE %s ADD COLUMN note text', :'q') AS alter_it \gset
:alter_it;
SELECT test_helpers.add(:'q', 1, 'c') AS c \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT is((SELECT array_agg(id) FROM outbox.claim_batch(:'q', 10)), :'c'::bigint[],
          'a claim after ALTER TABLE takes the new key''s head');

-- A statement that differs gets a function of its own; a read-only transaction makes none.
SELECT isnt(outbox._prepared(:qid, 'SELECT 1', '', 'TABLE(pgdrain_x integer)'),
            outbox._prepared(:qid, 'SELECT 2', '', 'TABLE(pgdrain_x integer)'),
            'a different statement is a different function');
-- DDL refused (an event trigger of the site's own): the statement runs itself, the call does not fail.
CREATE FUNCTION pg_temp.refuse_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'no DDL here'; END $$;
CREATE EVENT TRIGGER refuse_ddl ON ddl_command_start EXECUTE FUNCTION pg_temp.refuse_ddl();
SELECT is(outbox._prepared(:qid, 'SELECT 4', '', 'TABLE(pgdrain_x integer)'), 'SELECT 4',
          'DDL refused by an event trigger: the statement runs itself');
DROP EVENT TRIGGER refuse_ddl;
SAVEPOINT ro;
SET LOCAL transaction_read_only = on;
SELECT is(outbox._prepared(:qid, 'SELECT 3', '', 'TABLE(pgdrain_x integer)'), 'SELECT 3',
          'a read-only transaction runs the statement itself');
ROLLBACK TO SAVEPOINT ro;

SELECT outbox.drop_queue(:'q');
SELECT is(pg_temp.kept(), 0::bigint, 'drop_queue drops the queue''s kept statements');

SELECT * FROM finish();
ROLLBACK;
