-- The commit step (outbox.pgdrain_commit, run here with SET CONSTRAINTS ... IMMEDIATE, which is what
-- COMMIT does) of a REPEATABLE READ producer, which reads the key clocks: heads for new keys, clocks
-- raised to the largest ids, and a key whose clock says another transaction committed a larger id
-- gets this transaction's rows renumbered past it, in order. (READ COMMITTED producers read lateness
-- from the queue table and leave the clocks as they are: read_committed_locks_clocks_without_writing;
-- renumbering among real concurrent producers: gocheck's TestProducers_DeliveryFollowsCommitOrder_*.)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT plan(11);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 2, 'late') AS late_ids \gset
SELECT test_helpers.add(:'q', 1, 'fresh') AS fresh_ids \gset
-- As if another transaction had committed a row of 'late' with the larger of our two ids.
INSERT INTO outbox.partition_clocks (queue_id, slot, committed_max)
VALUES (:qid, hashtext('late') & 65535, (:'late_ids'::bigint[])[2]);

SELECT is((SELECT count(*) FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()), 1::bigint,
          'the transaction''s inserts queued the commit step once (one note of the table)');
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;

SELECT results_eq(format('SELECT array_agg(id ORDER BY id) FROM %s WHERE k = %L', :'q', 'fresh'),
                  format('SELECT %L::bigint[]', :'fresh_ids'), 'a key that is not late keeps its ids');
SELECT results_eq(format('SELECT count(*) FILTER (WHERE id = ANY (%L::bigint[])), count(*), min(id) > %s FROM %s WHERE k = %L',
                         :'late_ids', (:'late_ids'::bigint[])[2], :'q', 'late'),
                  $$VALUES (0::bigint, 2::bigint, true)$$,
                  'the late key''s two rows got new ids, larger than the committed one');
SELECT results_eq(format('SELECT payload->>''i'' FROM %s WHERE k = %L ORDER BY id', :'q', 'late'),
                  format('SELECT x::text FROM unnest(ARRAY[1, 2]) x'),
                  'renumbering keeps their order');
SELECT results_eq(format($$SELECT h.partition_key, h.head_id = (SELECT min(id) FROM %s t WHERE t.k = h.partition_key)
                           FROM outbox.partition_heads h WHERE h.queue_id = %s ORDER BY 1$$, :'q', :qid),
                  $$VALUES ('fresh'::text, true), ('late', true)$$,
                  'both keys got a head, pointing at their (new) first row');
SELECT results_eq(format($$SELECT c.committed_max = (SELECT max(id) FROM %s t WHERE hashtext(t.k) & 65535 = c.slot)
                           FROM outbox.partition_clocks c WHERE c.queue_id = %s$$, :'q', :qid),
                  $$VALUES (true), (true)$$,
                  'each key''s clock holds its largest committed id');
SELECT is((SELECT count(*) FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()), 0::bigint,
          'the commit step took its note');

-- A 300-key transaction: its commit locks are the clock rows of its key hashes, written (and so
-- locked) by this transaction until it ends; no advisory lock, so none fills the lock table.
SELECT count(test_helpers.add(:'q', 1, 'bulk-' || g)) AS _ FROM generate_series(1, 300) g \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT is((SELECT count(*) FROM outbox.partition_clocks c
           WHERE c.queue_id = :qid AND c.xmin = (txid_current() % 4294967296)::text::xid
             AND c.slot IN (SELECT hashtext('bulk-' || g) & 65535 FROM generate_series(1, 300) g)),
          (SELECT count(DISTINCT hashtext('bulk-' || g) & 65535) FROM generate_series(1, 300) g),
          'a 300-key transaction holds the clock row of each of its key hashes');
SELECT is((SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
             AND classid = (1885823232 + :qid)::oid
             AND (objid::bigint <= 131071 OR objid::bigint = 4294967294)), 0::bigint,
          'and no advisory lock for a partition or the whole queue (the ones producers took before 00008/00009)');

-- A producer may give a row any id (explicit ids are not renumbered): it raises its key's clock no
-- further than the last id the sequence gave out, which would stop later commits from being
-- renumbered.
SELECT format('INSERT INTO %s (event_type, payload, k, id) VALUES (''e'', ''{}'', ''explicit'', 9000000000)', :'q')
  AS explicit_insert \gset
:explicit_insert;
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT is((SELECT committed_max FROM outbox.partition_clocks WHERE queue_id = :qid AND slot = hashtext('explicit') & 65535),
          pg_sequence_last_value(pg_get_serial_sequence(:'q', 'id')::regclass),
          'an explicit id raises a clock no further than the last id given out');

-- The notes the commit step reads are written only by the definer's triggers: no producer (nor
-- worker) can forge one, to make a head point at another partition's row.
SELECT ok(NOT has_table_privilege('pgdrain_producer', 'outbox.commit_hooks', 'INSERT')
          AND NOT has_table_privilege('pgdrain_producer', 'outbox.commit_notes', 'INSERT, UPDATE, DELETE')
          AND NOT has_table_privilege('pgdrain_worker', 'outbox.commit_hooks', 'INSERT')
          AND NOT has_table_privilege('pgdrain_worker', 'outbox.commit_notes', 'INSERT, UPDATE, DELETE'),
          'producers and workers can not write the notes the commit step reads');

SELECT * FROM finish();
ROLLBACK;
