-- Lease and token are set together and cleared together on every outcome (sent, transient,
-- permanent) and on release: no row ever has one without the other.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT count(test_helpers.add(:'q', 1, 'k' || i)) AS _ FROM generate_series(1, 4) i \gset
CREATE TEMP TABLE b ON COMMIT DROP AS SELECT row_number() OVER (ORDER BY id) AS n, * FROM outbox.claim_batch(:'q', 10);
SELECT is(test_helpers.ids_where(:'q', 'lease_token IS NOT NULL AND leased_until IS NOT NULL'),
          (SELECT array_agg(id ORDER BY id) FROM b), 'claiming sets lease and token together on every row');

SELECT ok(outbox.apply_result(:'q', id, lease_token, 'sent'), 'outcome sent') FROM b WHERE n = 1;
SELECT ok(outbox.apply_result(:'q', id, lease_token, 'transient'), 'outcome transient') FROM b WHERE n = 2;
SELECT ok(outbox.apply_result(:'q', id, lease_token, 'permanent'), 'outcome permanent') FROM b WHERE n = 3;
SELECT ok(outbox.release(:'q', id, lease_token), 'release') FROM b WHERE n = 4;
SELECT is(test_helpers.ids_where(:'q', 'lease_token IS NOT NULL OR leased_until IS NOT NULL'), '{}'::bigint[],
          'after sent, transient, permanent and release every row has neither lease nor token');

SELECT * FROM finish();
ROLLBACK;
