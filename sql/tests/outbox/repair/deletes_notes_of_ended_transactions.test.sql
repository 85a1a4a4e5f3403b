-- Notes of a transaction that ended without its commit step (pgdrain_commit disabled) are never
-- read again: outbox.repair reports them as stale_notes and, unless dry_run, deletes them (and the
-- transaction's hook), counted in outbox.repairs. Notes of a transaction still open, this one's,
-- are left alone. A SERIALIZABLE transaction's notes are in its hook (00023): the same.
SELECT pg_current_xact_id() AS ended_xid \gset
SELECT pg_current_xact_id() AS ended_serializable_xid \gset
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT oid AS table_oid FROM pg_class WHERE oid = :'q'::regclass \gset
-- What an ended transaction whose commit step never ran leaves behind, and an open one's note (this
-- transaction's, written by hand: a row of it would be reported as a key without a head, which
-- this transaction's own repair sees before its commit step made it).
INSERT INTO outbox.commit_notes (xid, table_oid, keys, ids) VALUES
  (:'ended_xid', :table_oid, '{a}', '{1}'), (:'ended_xid', :table_oid, '{b}', '{2}'),
  (pg_current_xact_id(), :table_oid, '{open}', '{3}');
INSERT INTO outbox.commit_hooks (xid, table_oids, keys, ids)
VALUES (:'ended_serializable_xid', ARRAY[:table_oid, :table_oid, :table_oid]::oid[], '{c,d,e}', '{4,5,6}');

SELECT results_eq(format('SELECT partition_key, cause, detail FROM outbox.repair(%L, dry_run => true)', :'q'),
                  format($$VALUES (NULL::text, 'stale_notes'::text, '2 notes of transaction %s, which ended without its commit step'::text),
                                  (NULL, 'stale_notes', '3 notes of transaction %s, which ended without its commit step')$$,
                         :'ended_xid', :'ended_serializable_xid'),
                  'dry_run reports the ended transactions'' notes, in commit_notes and in a SERIALIZABLE one''s hook');
SELECT is((SELECT count(*) FROM outbox.commit_notes WHERE xid = :'ended_xid'), 2::bigint, 'and keeps them');
SELECT results_eq(format('SELECT cause FROM outbox.repair(%L)', :'q'), $$VALUES ('stale_notes'::text), ('stale_notes')$$,
                  'repair reports them');
SELECT results_eq($$SELECT (SELECT count(*) FROM outbox.commit_notes WHERE xid = $$ || quote_literal(:'ended_xid') || $$),
                           (SELECT count(*) FROM outbox.commit_notes WHERE xid = pg_current_xact_id())$$,
                  $$VALUES (0::bigint, 1::bigint)$$,
                  'deletes them, and leaves the open transaction''s note');
SELECT is((SELECT count(*) FROM outbox.commit_hooks WHERE xid = :'ended_serializable_xid'), 0::bigint,
          'and the SERIALIZABLE transaction''s hook');
SELECT is((SELECT repairs FROM outbox.repairs WHERE queue = :'q' AND cause = 'stale_notes'), 2::bigint,
          'counted in outbox.repairs');

SELECT * FROM finish();
