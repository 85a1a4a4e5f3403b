-- Notes of a transaction that ended without its commit step (pgdrain_commit disabled) are never
-- read again: outbox.repair reports them as stale_notes and, unless dry_run, deletes them (and the
-- transaction's hook), counted in outbox.repairs. Notes of a transaction still open, this one's,
-- are left alone.
SELECT pg_current_xact_id() AS ended_xid \gset
BEGIN;
SELECT plan(5);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT oid AS table_oid FROM pg_class WHERE oid = :'q'::regclass \gset
-- What an ended transaction whose commit step never ran leaves behind, and an open one's note (this
-- transaction's, written by hand: a row of it would be reported as a key without a head, which
-- this transaction's own repair sees before its commit step made it).
INSERT INTO outbox.commit_notes (xid, table_oid, keys, ids) VALUES
  (:'ended_xid', :table_oid, '{a}', '{1}'), (:'ended_xid', :table_oid, '{b}', '{2}'),
  (pg_current_xact_id(), :table_oid, '{open}', '{3}');

SELECT results_eq(format('SELECT partition_key, cause, detail FROM outbox.repair(%L, dry_run => true)', :'q'),
                  format($$VALUES (NULL::text, 'stale_notes'::text, '2 notes of transaction %s, which ended without its commit step'::text)$$, :'ended_xid'),
                  'dry_run reports the ended transaction''s notes');
SELECT is((SELECT count(*) FROM outbox.commit_notes WHERE xid = :'ended_xid'), 2::bigint, 'and keeps them');
SELECT is((SELECT cause FROM outbox.repair(:'q')), 'stale_notes', 'repair reports them');
SELECT results_eq($$SELECT (SELECT count(*) FROM outbox.commit_notes WHERE xid = $$ || quote_literal(:'ended_xid') || $$),
                           (SELECT count(*) FROM outbox.commit_notes WHERE xid = pg_current_xact_id())$$,
                  $$VALUES (0::bigint, 1::bigint)$$,
                  'deletes them, and leaves the open transaction''s note');
SELECT is((SELECT repairs FROM outbox.repairs WHERE queue = :'q' AND cause = 'stale_notes'), 1::bigint,
          'counted in outbox.repairs');

SELECT * FROM finish();
