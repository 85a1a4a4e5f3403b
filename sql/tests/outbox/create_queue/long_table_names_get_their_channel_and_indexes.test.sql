-- A queue's default NOTIFY channel is pgdrain_<schema>_<table>; a table name too long for that to
-- be a channel (63 characters) gets the first 54 and a hash of the whole name, so that every
-- table a queue may be has a default channel (create_queue blamed the channel, which the caller
-- never gave). Two long names alike in their first 54 characters get different channels, and
-- different index names (a table name over 40 characters: its first 31 and a hash).
BEGIN;
SELECT plan(6);

SELECT 'public.' || repeat('t', 55) AS q1, 'public.' || repeat('t', 54) || 'u' AS q2 \gset
SELECT lives_ok(format('SELECT outbox.create_queue(%L)', :'q1'), 'a 55-character table name is a queue');
SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q2', 'k'), 'so is another one, partitioned');
SELECT is((SELECT length(channel) FROM outbox.queues WHERE queue = :'q1'), 63, 'its channel has 63 characters');
SELECT isnt((SELECT channel FROM outbox.queues WHERE queue = :'q1'), (SELECT channel FROM outbox.queues WHERE queue = :'q2'),
            'two long names get two channels');
SELECT is((SELECT count(*) FROM pg_indexes WHERE tablename IN (repeat('t', 55), repeat('t', 54) || 'u') AND indexname LIKE '%\_pgdrain\_%'),
          3::bigint, 'each has its own required indexes (one claim index, and a partition index for the partitioned one)');
SELECT test_helpers.new_queue() AS q3 \gset
SELECT is((SELECT channel FROM outbox.queues WHERE queue = :'q3'), 'pgdrain_' || replace(:'q3', '.', '_'),
          'a short name keeps pgdrain_<schema>_<table>');

SELECT * FROM finish();
ROLLBACK;
