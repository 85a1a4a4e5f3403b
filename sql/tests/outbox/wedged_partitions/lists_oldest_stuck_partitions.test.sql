-- wedged_partitions lists the partitions whose head is older than older_than, oldest first, with
-- the head's attempts, error, pending count and why it does not move.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 3, 'old') AS o \gset
SELECT test_helpers.add(:'q', 1, 'older') AS o2 \gset
SELECT test_helpers.add(:'q', 1, 'fresh') AS f \gset
SELECT format($$UPDATE %1$s SET created_at = now() - interval '1 hour' WHERE k = 'old';
                UPDATE %1$s SET created_at = now() - interval '2 hours' WHERE k = 'older'$$, :'q') AS ddl \gset
:ddl;
CREATE TEMP TABLE b ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT ok(outbox.apply_result(:'q', id, lease_token, 'transient', '503 from peer'), 'the old partition''s head fails')
FROM b WHERE partition_key = 'old';

SELECT results_eq(
  format($$SELECT partition_key, head_id, head_attempt_count, head_last_error, oldest_pending_at, pending
           FROM outbox.wedged_partitions(%L, '30 minutes')$$, :'q'),
  format($$VALUES ('older'::text, %s::bigint, 0, NULL::text, now() - interval '2 hours', 1::bigint),
                  ('old', %s, 1, '503 from peer', now() - interval '1 hour', 3)$$, (:'o2'::bigint[])[1], (:'o'::bigint[])[1]),
  'the two partitions older than 30 minutes are listed, oldest first, with head, attempts, error and pending count');
SELECT is((SELECT reason FROM outbox.wedged_partitions(:'q', '30 minutes') WHERE partition_key = 'old') ~ '^backing off until .* after 1 attempts$',
          true, 'the reason says the head is backing off');
SELECT is((SELECT count(*) FROM outbox.wedged_partitions(:'q', '30 minutes', 1)), 1::bigint, 'max_partitions bounds the list');
SELECT throws_ok(format('SELECT * FROM outbox.wedged_partitions(%L, %L, 0)', :'q', '1 minute'), '22023',
  'wedged_partitions: max_partitions must be between 1 and 10000, got 0', 'wedged_partitions rejects max_partitions 0');
SELECT test_helpers.new_queue() AS u \gset
SELECT throws_ok(format('SELECT * FROM outbox.wedged_partitions(%L, %L)', :'u', '1 minute'), '22023',
  format('wedged_partitions: queue %s has no partition column', :'u'), 'wedged_partitions refuses an unpartitioned queue');

SELECT * FROM finish();
ROLLBACK;
