-- settle_locked takes ownership from the row lock, not from the list claim_locked keeps in a
-- setting (which the caller can write): a row claimed in a savepoint that was rolled back (its lock
-- went with it) and a row nobody locked are refused with 55000 even when the list names them, and
-- the refused call records nothing and leaves no lock behind.
BEGIN;
SELECT plan(8);

SELECT test_helpers.new_queue() AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 3) AS r \gset

SAVEPOINT a;
SELECT id AS r1 FROM outbox.claim_locked(:'q', 1) \gset
ROLLBACK TO SAVEPOINT a;
RELEASE SAVEPOINT a;
SELECT is(current_setting('pgdrain.held_' || :qid, true), '', 'rolling the savepoint back took the claim off the held list');
SELECT test_helpers.state(:'q') AS before \gset

-- Put the row back on the list by hand: its lock is gone all the same.
SELECT set_config('pgdrain.held_' || :qid, :'r1', true) AS _ \gset
SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q', ARRAY[:r1::bigint], '{sent}'), '55000',
  format('settle_locked: row %s of %s is not held by this transaction (claim it with claim_locked in the same transaction)', :r1, :'q'),
  'a row whose claiming savepoint was rolled back is refused even when the held list names it');

-- A row never locked at all, listed by hand.
SELECT set_config('pgdrain.held_' || :qid, (:'r'::bigint[])[3]::text, true) AS _ \gset
SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q', ARRAY[(:'r'::bigint[])[3]], '{transient}'), '55000',
  format('settle_locked: row %s of %s is not held by this transaction (claim it with claim_locked in the same transaction)',
         (:'r'::bigint[])[3], :'q'),
  'a row nobody locked is refused even when the held list names it');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'the refused calls recorded nothing');

-- A refused call leaves no lock: the rows are claimed again, by this very transaction.
SELECT set_config('pgdrain.held_' || :qid, '', true) AS _ \gset
SELECT set_eq(format('SELECT id FROM outbox.claim_locked(%L, 10)', :'q'), :'r'::bigint[],
              'every row is claimable again');
SAVEPOINT b;
SELECT is(outbox.settle_locked(:'q', :'r'::bigint[], '{sent,sent,sent}'), 3::bigint, 'and, claimed for real, settled');
ROLLBACK TO SAVEPOINT b;

-- A row held at the top level, and one held in a savepoint that was rolled back, in one call:
-- the call is refused as a whole.
SELECT test_helpers.add(:'q', 1) AS extra \gset
SAVEPOINT c;
SELECT id AS r_lost FROM outbox.claim_locked(:'q', 10) \gset
ROLLBACK TO SAVEPOINT c;
SELECT set_config('pgdrain.held_' || :qid, current_setting('pgdrain.held_' || :qid) || ',' || :r_lost, true) AS _ \gset
SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q',
                        ARRAY[(:'r'::bigint[])[1], (:'r'::bigint[])[2], :r_lost::bigint], '{sent,sent,sent}'), '55000',
  format('settle_locked: row %s of %s is not held by this transaction (claim it with claim_locked in the same transaction)', :r_lost, :'q'),
  'a call mixing held rows with a row whose savepoint was rolled back is refused');
SELECT is(:r_lost::bigint, (:'extra'::bigint[])[1], 'that row was the one claimed in the savepoint');

SELECT * FROM finish();
ROLLBACK;
