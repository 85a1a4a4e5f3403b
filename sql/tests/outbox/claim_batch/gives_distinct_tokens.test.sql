-- Tokens are per row, never per batch: every row of one batch gets its own fresh token.
BEGIN;
SELECT plan(5);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 50) AS _ \gset
CREATE TEMP TABLE b1 ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 50);
SELECT is((SELECT count(DISTINCT lease_token) FROM b1), 50::bigint, 'a batch of 50 rows carries 50 distinct tokens');
SELECT is((SELECT count(*) FROM b1 WHERE lease_token IS NULL), 0::bigint, 'no claimed row lacks a token');
SELECT set_eq('SELECT id, lease_token FROM b1',
              format('SELECT id, lease_token FROM %s', :'q'),
              'the tokens returned are the tokens stored in the rows');

SELECT test_helpers.new_queue('k') AS p \gset
SELECT count(test_helpers.add(:'p', 2, 'key' || i)) AS _ FROM generate_series(1, 20) i \gset
CREATE TEMP TABLE b2 ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'p', 100);
SELECT is((SELECT count(DISTINCT lease_token) FROM b2), 20::bigint,
          'a partitioned batch of 20 heads carries 20 distinct tokens');
SELECT test_helpers.expire_leases(:'p') AS _ \gset
SELECT is((SELECT count(*) FROM outbox.claim_batch(:'p', 100) c JOIN b2 USING (lease_token)), 0::bigint,
          're-claimed rows get tokens none of which was used before');

SELECT * FROM finish();
ROLLBACK;
