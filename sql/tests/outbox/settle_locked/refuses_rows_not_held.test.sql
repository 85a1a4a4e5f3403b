-- settle_locked refuses (55000) any row this transaction did not claim with claim_locked, even
-- when the other rows of the call are held, and then records nothing; bad arrays raise 22023.
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 3) AS r \gset
-- A lease (claim_batch) is not a lock-mode claim.
SELECT test_helpers.new_queue() AS q2 \gset
SELECT test_helpers.add(:'q2', 1) AS r2 \gset
SELECT lease_token AS t2 FROM outbox.claim_batch(:'q2') \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q', ARRAY[(:'r'::bigint[])[1]], '{sent}'), '55000',
  format('settle_locked: row %s of %s is not held by this transaction (claim it with claim_locked in the same transaction)',
         (:'r'::bigint[])[1], :'q'),
  'settle_locked refuses a row that was never claimed in this transaction');

SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q2', :'r2', '{sent}'), '55000',
  format('settle_locked: row %s of %s is not held by this transaction (claim it with claim_locked in the same transaction)',
         (:'r2'::bigint[])[1], :'q2'),
  'settle_locked refuses a row leased by claim_batch');

SELECT id AS held FROM outbox.claim_locked(:'q', 1) \gset
SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q', ARRAY[:held::bigint, (:'r'::bigint[])[3]], '{sent,sent}'), '55000',
  format('settle_locked: row %s of %s is not held by this transaction (claim it with claim_locked in the same transaction)',
         (:'r'::bigint[])[3], :'q'),
  'settle_locked refuses a call mixing a held row with one not held');
SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q', ARRAY[:held::bigint], '{sent,sent}'), '22023',
  'settle_locked: outcomes must have as many elements as ids (1), got 2', 'settle_locked rejects arrays of different lengths');
SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q', ARRAY[:held::bigint, :held::bigint], '{sent,sent}'), '22023',
  'settle_locked: ids must be distinct', 'settle_locked rejects duplicate ids');
SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q', ARRAY[:held::bigint], '{delivered}'), '22023',
  'settle_locked: outcomes must hold only ''sent'', ''transient'' or ''permanent'', got ''delivered'' (element 1)', 'settle_locked rejects an unknown outcome');
SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', 'a.b.c', ARRAY[:held::bigint], '{sent}'), '22023',
  'settle_locked: queue must be a plain name "schema.table" (letters, digits, _), got ''a.b.c''', 'settle_locked rejects a three-part name');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'none of the refused calls recorded anything');
SELECT is(outbox.settle_locked(:'q', ARRAY[:held::bigint], '{sent}'), 1::bigint, 'the held row can still be settled afterwards');

SELECT * FROM finish();
ROLLBACK;
