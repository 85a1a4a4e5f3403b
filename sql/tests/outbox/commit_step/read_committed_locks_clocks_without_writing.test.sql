-- A READ COMMITTED commit step takes its commit lock (the key hash's clock row) without writing it:
-- a row written on every commit of a key piles up one version per commit while any session holds
-- back the xmin horizon, and every later commit of the key walked them (issue 29). Lateness comes
-- from the queue table instead (outbox._late_rows). The commit step runs here with SET CONSTRAINTS
-- ... IMMEDIATE, which is what COMMIT does.
BEGIN;
SELECT plan(14);
-- Function calls are counted from where the checks below say, whatever the server's default
-- (a server that tracks PL functions would count the earlier calls too).
SET LOCAL track_functions = 'none';

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT (test_helpers.add(:'q', 1, 'hot'))[1] AS first_id \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT ctid AS clock_ctid, committed_max AS clock_max FROM outbox.partition_clocks
WHERE queue_id = :qid AND slot = hashtext('hot') & 65535 \gset
SELECT is(:'clock_max'::bigint, :'first_id'::bigint, 'the first commit of a key hash makes its clock row');

-- The same key again, through the single-row path (the key has a head now) and the general one.
SELECT test_helpers.add(:'q', 1, 'hot') AS _ \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT test_helpers.add(:'q', 2, 'hot') AS _ \gset
SELECT test_helpers.add(:'q', 1, 'other') AS _ \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT results_eq(format('SELECT ctid, committed_max FROM outbox.partition_clocks WHERE queue_id = %s AND slot = %s',
                         :qid, hashtext('hot') & 65535),
                  format('VALUES (%L::tid, %s::bigint)', :'clock_ctid', :'clock_max'),
                  'later commits of the key leave its clock row as it was: no new version, no new value');
SELECT ok(EXISTS (SELECT 1 FROM outbox.partition_clocks c
                  WHERE c.queue_id = :qid AND c.slot = hashtext('hot') & 65535 AND c.xmax::text = (txid_current() % 4294967296)::text),
          'and it is locked by this transaction until it ends (xmax: a lock, not an update)');
SELECT results_eq(format('SELECT array_agg(id ORDER BY id) = (SELECT array_agg(id ORDER BY id) FROM %1$s WHERE k = %2$L AND id >= %3$s)
                          FROM %1$s WHERE k = %2$L', :'q', 'hot', :'first_id'),
                  $$VALUES (true)$$,
                  'a transaction''s own rows are never late against each other: no id changed');
SELECT results_eq(format($$SELECT h.head_id FROM outbox.partition_heads h WHERE h.queue_id = %s AND h.partition_key = 'hot'$$, :qid),
                  format('VALUES (%s::bigint)', :'first_id'),
                  'the key''s head still points at its first row');

-- The probe of the queue table: rows of this transaction do not count, committed rows of others
-- above our smallest id do, delivered or not (gocheck's TestProducers_DeliveryFollowsCommitOrder_*
-- commits them).
SELECT is(outbox._late_rows((SELECT q FROM outbox.queues q WHERE q.queue_id = :qid), ARRAY['hot', 'other', 'none'],
                            ARRAY[:first_id - 1, :first_id - 1, :first_id - 1]::bigint[],
                            ARRAY[:first_id - 1, :first_id - 1, :first_id - 1]::bigint[]),
          ARRAY[NULL, NULL, NULL]::bigint[], 'outbox._late_rows: our own rows are not another transaction''s');
SELECT is((SELECT count(*) FROM pg_proc WHERE pronamespace = 'outbox'::regnamespace AND proname LIKE '\_q' || :qid || '\_late\_%'),
          1::bigint, 'its statement runs in one function made for the queue, kept for the session');

-- Every id from the transaction's first to the last one given out is its own (one statement of many
-- rows, nobody else between): nobody can have committed a larger one, and no statement runs. With a
-- gap (an id of another transaction between ours) it runs.
SELECT pg_sequence_last_value(pg_get_serial_sequence(:'q', 'id')) AS own_last \gset
SET LOCAL track_functions = 'all';
SELECT is(outbox._late_rows((SELECT q FROM outbox.queues q WHERE q.queue_id = :qid), ARRAY['hot', 'hot', 'other'],
                            ARRAY[:own_last - 2, :own_last - 1, :own_last]::bigint[],
                            ARRAY[:own_last - 2, :own_last - 1, :own_last]::bigint[]),
          NULL::bigint[], 'all ids since our first are ours: not late');
SELECT is((SELECT count(*) FROM pg_stat_xact_user_functions WHERE schemaname = 'outbox' AND funcname LIKE '\_q' || :qid || '\_late\_%'),
          0::bigint, 'and the question is not asked');
SELECT is(outbox._late_rows((SELECT q FROM outbox.queues q WHERE q.queue_id = :qid), ARRAY['hot', 'other'],
                            ARRAY[:own_last - 2, :own_last]::bigint[], ARRAY[:own_last - 2, :own_last]::bigint[]),
          ARRAY[NULL, NULL]::bigint[], 'an id between ours that is not in our arrays: still not late (it is ours)');
SELECT is((SELECT sum(calls)::bigint FROM pg_stat_xact_user_functions WHERE schemaname = 'outbox' AND funcname LIKE '\_q' || :qid || '\_late\_%'),
          1::bigint, 'but only the question can tell');

-- A renamed table gets a function of its own name (the old one names the old table).
SELECT format('%s_renamed', :'q') AS q2 \gset
SELECT format('ALTER TABLE %s RENAME TO %s', :'q', split_part(:'q2', '.', 2)) AS rename \gset
:rename;
SELECT is(outbox._late_rows((SELECT q FROM outbox.queues q WHERE q.queue_id = :qid), ARRAY['hot'], ARRAY[:first_id - 1]::bigint[],
                            ARRAY[:first_id - 1]::bigint[]),
          ARRAY[NULL]::bigint[], 'after a rename the probe still answers');
SELECT is((SELECT count(*) FROM pg_proc WHERE pronamespace = 'outbox'::regnamespace AND proname LIKE '\_q' || :qid || '\_late\_%'
             AND prosrc LIKE '%' || :'q2' || '%'),
          1::bigint, 'from a function made for the new name');

-- A transaction whose first row is more than 4,096 ids behind the last one given out is taken for
-- late on every key, past that last id: renumbering its rows costs less than reading all the rows
-- written since.
SELECT pg_sequence_last_value(pg_get_serial_sequence(:'q2', 'id')) AS last_id \gset
SELECT is(outbox._late_rows((SELECT q FROM outbox.queues q WHERE q.queue_id = :qid), ARRAY['hot', 'other'],
                            ARRAY[:last_id - 5000, :last_id - 5000]::bigint[], ARRAY[:last_id - 5000, :last_id - 5000]::bigint[]),
          ARRAY[:last_id, :last_id]::bigint[], 'a transaction older than 4,096 ids is late on every key');

SELECT * FROM finish();
ROLLBACK;
