-- A head whose row the application deleted (or made sent by hand) is not moved until a claim
-- reaches it or the repair pass finds it, and its key's later rows wait meanwhile: wedged_partitions
-- lists the key with its oldest pending row and says so (an inner join on the head's row left out
-- exactly that stuck key). The next claim to reach the head moves it on.
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue('k') AS q \gset
-- Each row's commit step run at once (it runs at COMMIT), as two transactions would.
SELECT format($$INSERT INTO %1$s (event_type, payload, k, created_at) VALUES ('e', '{}', 'a', now() - interval '1 hour')$$, :'q') AS ddl \gset
:ddl;
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT format($$DELETE FROM %1$s WHERE k = 'a'$$, :'q') AS ddl \gset
:ddl;
SELECT format($$INSERT INTO %1$s (event_type, payload, k, created_at) VALUES ('e', '{}', 'a', now() - interval '30 minutes')
                RETURNING id$$, :'q') AS ddl \gset
:ddl \gset second_
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT is((SELECT h.head_id <> :second_id FROM outbox.partition_heads h JOIN outbox.queues r USING (queue_id)
           WHERE r.queue = :'q' AND h.partition_key = 'a'), true, 'the head still points at the deleted row');

SELECT results_eq(
  format($$SELECT partition_key, head_id, head_attempt_count, oldest_pending_at, pending
           FROM outbox.wedged_partitions(%L, '1 minute')$$, :'q'),
  format($$VALUES ('a'::text, %s::bigint, 0, now() - interval '30 minutes', 1::bigint)$$, :second_id),
  'the key is listed with its oldest pending row');
SELECT matches((SELECT reason FROM outbox.wedged_partitions(:'q', '1 minute')),
  '^its head points at row [0-9]+, which is gone or sent: the next claim to reach the head, or the repair pass \(outbox.repair\), moves it on$',
  'and the reason says its head points at a row that is gone');

SELECT is((SELECT pg_catalog.array_agg(id) FROM outbox.claim_batch(:'q', 10)), ARRAY[:second_id::bigint],
  'the next claim moves the head on to the pending row and takes it');
SELECT * FROM finish();
ROLLBACK;
