-- The NOTIFY trigger of an unpartitioned queue fires at most once per statement (FOR EACH
-- STATEMENT, AFTER INSERT), never once per row; a partitioned queue has none (its commit step
-- notifies): its head trigger is statement-level too, and queues the commit step once per
-- transaction (the transaction's row in outbox.commit_hooks, whose constraint trigger is deferred).
BEGIN;
SELECT plan(15);

SELECT test_helpers.new_queue('resource_id') AS q \gset
SELECT split_part(:'q', '.', 2) AS t \gset
SELECT test_helpers.new_queue() AS q2 \gset
-- The trigger's arguments checked below are those of 'always' (new queues notify 'when_waiting').
SELECT outbox.set_notify(:'q2', 'always') IS NULL AS _ \gset

SELECT triggers_are('public', :'t', ARRAY['pgdrain_heads', 'pgdrain_key_fixed', 'pgdrain_snapshot', 'pgdrain_truncate'],
                    'a partitioned queue has exactly the partition-head, key-fixed, snapshot-producer and truncate triggers');
SELECT trigger_is('public', split_part(:'q2', '.', 2), 'pgdrain_notify', 'outbox', 'tg_queue__notify',
                  'pgdrain_notify calls outbox.tg_queue__notify');
-- tgtype bits: 1 = ROW, 2 = BEFORE, 4 = INSERT; 4 alone = AFTER INSERT FOR EACH STATEMENT.
SELECT is((SELECT tgtype::int FROM pg_trigger WHERE tgrelid = :'q2'::regclass AND tgname = 'pgdrain_notify'), 4,
          'the notify trigger is AFTER INSERT FOR EACH STATEMENT (tgtype 4: no ROW bit)');
SELECT is((SELECT tgtype::int FROM pg_trigger WHERE tgrelid = :'q'::regclass AND tgname = 'pgdrain_heads'), 4,
          'the partition-head trigger is AFTER INSERT FOR EACH STATEMENT');
SELECT is((SELECT encode(tgargs, 'escape') FROM pg_trigger WHERE tgrelid = :'q2'::regclass AND tgname = 'pgdrain_notify'),
          format('pgdrain_public_%s\000%s\000', split_part(:'q2', '.', 2), :'q2'),
          'the notify trigger carries the queue''s channel and name');
SELECT is_empty(
  format($$SELECT tgname FROM pg_trigger WHERE tgrelid IN (%L::regclass, %L::regclass)
           AND NOT tgisinternal AND (tgtype::int & 1) = 1 AND (tgtype::int & 4) = 4$$, :'q', :'q2'),
  'no queue trigger fires for each inserted row');
-- tgtype 17 = ROW (1) + UPDATE (16), AFTER: only an UPDATE naming the partition column (a BEFORE
-- UPDATE row trigger would have every row a claim or result updates locked first, fired or not).
SELECT is((SELECT tgtype::int FROM pg_trigger WHERE tgrelid = :'q'::regclass AND tgname = 'pgdrain_key_fixed'), 17,
          'the key-fixed trigger is AFTER UPDATE FOR EACH ROW, for nothing else');
SELECT ok((SELECT tgdeferrable AND tginitdeferred AND tgconstraint <> 0
           FROM pg_trigger WHERE tgrelid = 'outbox.commit_hooks'::regclass AND tgname = 'pgdrain_commit'),
          'the commit step is a constraint trigger on outbox.commit_hooks, deferred to COMMIT');

SELECT outbox.enqueue(:'q', 'e', '{}', 'k1') IS NULL AS _ \gset
SELECT outbox.enqueue(:'q', 'e', '{}', 'k2') IS NULL AS _ \gset
SELECT is(ARRAY[(SELECT count(*) FROM outbox.commit_hooks WHERE xid = pg_current_xact_id())::text,
                (SELECT count(*) FROM outbox.partition_heads h JOIN outbox.queues u USING (queue_id) WHERE u.queue = :'q')::text],
          ARRAY['1', '0'], 'two inserts queue the commit step once; heads wait for it');
SELECT lives_ok(format('TRUNCATE %s', :'q2'), 'no trigger event is pending on a queue table: it can be truncated');
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT is(ARRAY[(SELECT count(*) FROM outbox.commit_hooks WHERE xid = pg_current_xact_id())::text,
                (SELECT string_agg(h.partition_key, ',' ORDER BY h.partition_key) FROM outbox.partition_heads h
                 JOIN outbox.queues u USING (queue_id) WHERE u.queue = :'q')],
          ARRAY['0', 'k1,k2'], 'the commit step made both heads and took its note');
SELECT outbox.enqueue(:'q', 'e', '{}', 'k3') IS NULL AS _ \gset
SELECT lives_ok(format('TRUNCATE %s', :'q'), 'a partitioned queue written in this transaction can be truncated too');
SELECT triggers_are('public', split_part(:'q2', '.', 2), ARRAY['pgdrain_notify', 'pgdrain_truncate'],
                    'an unpartitioned queue has only the notify and truncate triggers');

SELECT outbox.create_queue(:'q2', NULL, 10, '1 second', '30 seconds', 'poison', 'Other_Channel') IS NULL AS _ \gset
SELECT is((SELECT count(*) FROM pg_trigger WHERE tgrelid = :'q2'::regclass AND tgname = 'pgdrain_notify'), 1::bigint,
          'calling create_queue again leaves one notify trigger, not two');
SELECT is((SELECT encode(tgargs, 'escape') FROM pg_trigger WHERE tgrelid = :'q2'::regclass AND tgname = 'pgdrain_notify'),
          format('other_channel\000%s\000', :'q2'),
          'a new channel replaces the old one (folded to lower case like LISTEN folds it)');

SELECT * FROM finish();
ROLLBACK;
