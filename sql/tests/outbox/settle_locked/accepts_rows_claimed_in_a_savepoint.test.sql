-- settle_locked accepts rows this transaction claimed inside a savepoint (drivers that set a
-- savepoint before each statement, nested atomic blocks): their xmax is the subtransaction's xid,
-- or a MultiXact when the transaction also holds a weaker lock on the row, and the lock is still
-- this transaction's while the savepoint is open or after it was released. Also a row whose settle
-- was rolled back to a savepoint (xmax then is a MultiXact that keeps the claim's lock).
BEGIN;
SELECT plan(11);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 5) AS r \gset
SELECT test_helpers.updates_in_tx(:'q') AS upd_before \gset

-- Claimed in a savepoint that was released, settled at the top level.
SAVEPOINT a;
SELECT id AS r1 FROM outbox.claim_locked(:'q', 1) \gset
RELEASE SAVEPOINT a;
SELECT is(outbox.settle_locked(:'q', ARRAY[:r1::bigint], '{sent}'), 1::bigint,
          'a row claimed in a released savepoint is settled at the top level');

-- Claimed and settled inside the same open savepoint.
SAVEPOINT b;
SELECT id AS r2 FROM outbox.claim_locked(:'q', 1) \gset
SELECT is(outbox.settle_locked(:'q', ARRAY[:r2::bigint], '{transient}'), 1::bigint,
          'a row claimed in an open savepoint is settled inside it');
RELEASE SAVEPOINT b;

-- Claimed two savepoints deep, settled one level up after the inner one was released.
SAVEPOINT c;
SAVEPOINT d;
SELECT id AS r3 FROM outbox.claim_locked(:'q', 1) \gset
RELEASE SAVEPOINT d;
SELECT is(outbox.settle_locked(:'q', ARRAY[:r3::bigint], '{permanent}'), 1::bigint,
          'a row claimed in a nested savepoint is settled in the enclosing one');
RELEASE SAVEPOINT c;

-- The transaction holds a weaker lock on the row (as a foreign-key check takes) before claiming it
-- in a savepoint: its xmax is a MultiXact of both.
SELECT format('SELECT 1 FROM %s WHERE id = %s FOR KEY SHARE', :'q', (:'r'::bigint[])[4]) AS keyshare \gset
:keyshare;
SAVEPOINT e;
SELECT id AS r4 FROM outbox.claim_locked(:'q', 1) \gset
RELEASE SAVEPOINT e;
SELECT is(:r4::bigint, (:'r'::bigint[])[4], 'the row held FOR KEY SHARE is claimed');
SELECT format('SELECT xmax AS r4_xmax FROM %s WHERE id = %s', :'q', :r4) AS get_xmax \gset
:get_xmax \gset
SELECT set_eq(format('SELECT mode FROM pg_get_multixact_members(%L::xid)', :'r4_xmax'), $$VALUES ('keysh'), ('forupd')$$,
              'its xmax is a MultiXact of the key-share lock and the claim');
SELECT is(outbox.settle_locked(:'q', ARRAY[:r4::bigint], '{sent}'), 1::bigint,
          'a row whose xmax is a MultiXact including this transaction''s claim is settled');

-- Claimed at the top level, settled in a savepoint that is rolled back (a driver's automatic
-- savepoint around a statement that failed later), then settled again: the rolled-back update
-- left a MultiXact in xmax that still carries the top level's lock.
SELECT id AS r5 FROM outbox.claim_locked(:'q', 1) \gset
SAVEPOINT f;
SELECT outbox.settle_locked(:'q', ARRAY[:r5::bigint], '{sent}') AS _ \gset
ROLLBACK TO SAVEPOINT f;
RELEASE SAVEPOINT f;
SELECT is(outbox.settle_locked(:'q', ARRAY[:r5::bigint], '{sent}'), 1::bigint,
          'a row whose settle was rolled back to a savepoint is settled again');

SELECT results_eq(
  format('SELECT id, sent_at IS NOT NULL, attempt_count FROM %s ORDER BY id', :'q'),
  format('VALUES (%s::bigint, true, 0), (%s, false, 1), (%s, false, 10), (%s, true, 0), (%s, true, 0)', :r1, :r2, :r3, :r4, :r5),
  'each outcome was recorded');
SELECT is(test_helpers.updates_in_tx(:'q') - :upd_before::bigint, 6::bigint,
          'each settled row was written once (and the rolled-back settle once more)');

-- Partitioned: the head claimed in a savepoint is settled and the partition moves on.
SELECT test_helpers.new_queue('k') AS p \gset
SELECT test_helpers.add(:'p', 2, 'a') AS pa \gset
SAVEPOINT g;
SELECT id AS head FROM outbox.claim_locked(:'p') \gset
RELEASE SAVEPOINT g;
SELECT is(outbox.settle_locked(:'p', ARRAY[:head::bigint], '{sent}'), 1::bigint,
          'the head of a partition claimed in a released savepoint is settled');
SELECT results_eq(format('SELECT id FROM outbox.claim_locked(%L)', :'p'), format('VALUES (%s::bigint)', (:'pa'::bigint[])[2]),
                  'and the next row of the partition becomes claimable');

SELECT * FROM finish();
ROLLBACK;
