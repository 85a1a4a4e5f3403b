-- A claim inside a transaction that began a while ago still hands out a whole lease: leases run
-- from the clock, not from the transaction's start.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 1, 'a') AS a \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SELECT pg_sleep(1.5);
CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10, interval '1 second');

SELECT is((SELECT count(*) FROM c), 1::bigint, 'the row is claimed');
SELECT ok((SELECT leased_until > clock_timestamp() + interval '500 milliseconds' FROM c),
          'its lease ends a whole lease after the claim, not after the transaction''s start');
SELECT is(outbox.next_due(:'q'), (SELECT leased_until FROM c),
          'next_due says the row comes back exactly when its lease ends');

SELECT * FROM finish();
ROLLBACK;
