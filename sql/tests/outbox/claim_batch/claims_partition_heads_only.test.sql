-- On a partitioned queue claim_batch takes only partition heads: one row per partition per batch,
-- the one with no deliverable predecessor; the next row of a partition follows only once its
-- predecessor is sent.
BEGIN;
SELECT plan(8);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 3, 'a') AS a \gset
SELECT test_helpers.add(:'q', 2, 'b') AS b \gset
SELECT test_helpers.add(:'q', 1, 'c') AS c \gset

CREATE TEMP TABLE b1 ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 100);
SELECT results_eq('SELECT id, partition_key FROM b1',
  format($$VALUES (%s::bigint, 'a'::text), (%s, 'b'), (%s, 'c')$$, (:'a'::bigint[])[1], (:'b'::bigint[])[1], (:'c'::bigint[])[1]),
  'a batch takes exactly the first row of each partition');
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 100)', :'q'),
                'while the heads are leased their successors are not claimable');

SELECT ok(outbox.apply_result(:'q', id, lease_token, 'sent'), 'partition a''s head is sent')
FROM b1 WHERE partition_key = 'a';
SELECT results_eq(format('SELECT id, partition_key FROM outbox.claim_batch(%L, 100)', :'q'),
  format($$VALUES (%s::bigint, 'a'::text)$$, (:'a'::bigint[])[2]),
  'after its head is sent, the second row of partition a becomes the head; b and c stay leased');

SELECT test_helpers.expire_leases(:'q') AS _ \gset
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 100)', :'q'),
  format($$VALUES (%s::bigint), (%s), (%s)$$, (:'a'::bigint[])[2], (:'b'::bigint[])[1], (:'c'::bigint[])[1]),
  'after the leases expire the same heads are claimed again, never their successors');

-- A small batch takes the oldest heads first and still one per partition.
SELECT test_helpers.new_queue('k') AS q2 \gset
SELECT test_helpers.add(:'q2', 2, 'x') AS x \gset
SELECT test_helpers.add(:'q2', 2, 'y') AS y \gset
SELECT test_helpers.add(:'q2', 2, 'z') AS z \gset
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 2)', :'q2'),
  format($$VALUES (%s::bigint), (%s)$$, (:'x'::bigint[])[1], (:'y'::bigint[])[1]),
  'a batch of 2 takes the heads of the two oldest partitions');
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 2)', :'q2'),
  format($$VALUES (%s::bigint)$$, (:'z'::bigint[])[1]),
  'the next batch takes the remaining head only');

-- Rows inserted by plain INSERT in one statement across keys also obey the rule.
SELECT test_helpers.new_queue('k') AS q3 \gset
SELECT format($$INSERT INTO %s (event_type, payload, k) SELECT 'e', '{}', 'k' || (i %% 3) FROM generate_series(1, 30) i$$, :'q3') AS ddl \gset
:ddl;
SELECT results_eq(format('SELECT partition_key, id FROM outbox.claim_batch(%L, 100) ORDER BY partition_key', :'q3'),
  format('SELECT k, min(id) FROM %s GROUP BY k ORDER BY k', :'q3'),
  'a multi-row INSERT of 30 rows over 3 keys yields exactly the 3 partition heads');

SELECT * FROM finish();
ROLLBACK;
