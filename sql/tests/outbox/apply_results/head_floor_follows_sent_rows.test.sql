-- A result that moves a head on to a row with every row of the key below it sent raises the head's
-- floor to that row (READ COMMITTED): later claims and head moves start there instead of walking
-- the index entries of every sent row from the key's first one. A poisoned row in between keeps the
-- floor where it is until the locked second look raises it past the poisoned row, and a floor that
-- is lower than the head it found (a wake note's, a restore's) is raised the same way. But not by the
-- transaction that wrote the head's version (everything here is one transaction, like a lock-mode
-- batch recording a key twice): its lock would make producers wait (00040), so the floor stays until
-- a later transaction moves the head (TestHeads_FloorRisesPastPoisonedRowsInTheNextTransaction).
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 4, 'a') AS a \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;

-- As after a crash rebuild or a wake note: the floor is below the head.
UPDATE outbox.partition_heads SET floor_id = 0 WHERE queue_id = :qid AND partition_key = 'a';

CREATE TEMP TABLE claimed ON COMMIT DROP AS SELECT id, lease_token FROM outbox.claim_batch(:'q', 10);
SELECT results_eq('SELECT id FROM claimed', format('VALUES (%s::bigint)', (:'a'::bigint[])[1]),
                  'the claim takes the key''s first row');
SELECT is((SELECT applied FROM outbox.apply_results(:'q', ARRAY(SELECT id FROM claimed),
                                                     ARRAY(SELECT lease_token FROM claimed), '{sent}')),
          true, 'the first row is sent');
SELECT results_eq(format($$SELECT head_id, floor_id FROM outbox.partition_heads
                           WHERE queue_id = %s AND partition_key = 'a'$$, :qid),
                  format('VALUES (%s::bigint, %s::bigint)', (:'a'::bigint[])[2], (:'a'::bigint[])[2]),
                  'the head moved on to the second row, and its floor with it');

-- The second row fails for good: it is poisoned, and the head steps over it.
TRUNCATE claimed;
INSERT INTO claimed SELECT id, lease_token FROM outbox.claim_batch(:'q', 10);
SELECT results_eq('SELECT id FROM claimed', format('VALUES (%s::bigint)', (:'a'::bigint[])[2]),
                  'the next claim takes the second row');
SELECT is((SELECT applied FROM outbox.apply_results(:'q', ARRAY(SELECT id FROM claimed),
                                                     ARRAY(SELECT lease_token FROM claimed), '{permanent}',
                                                     '{"refused"}')),
          true, 'the second row is refused for good');
SELECT results_eq(format($$SELECT head_id, floor_id FROM outbox.partition_heads
                           WHERE queue_id = %s AND partition_key = 'a'$$, :qid),
                  format('VALUES (%s::bigint, %s::bigint)', (:'a'::bigint[])[3], (:'a'::bigint[])[2]),
                  'past the poisoned row: head at the third row, the floor where this transaction left it');

-- A floor below the head (a wake note lowered it) is raised when the head moves on.
UPDATE outbox.partition_heads SET floor_id = (:'a'::bigint[])[1] WHERE queue_id = :qid AND partition_key = 'a';
TRUNCATE claimed;
INSERT INTO claimed SELECT id, lease_token FROM outbox.claim_batch(:'q', 10);
SELECT is((SELECT applied FROM outbox.apply_results(:'q', ARRAY(SELECT id FROM claimed),
                                                     ARRAY(SELECT lease_token FROM claimed), '{sent}')),
          true, 'the third row is sent');
-- From floor 1 the poisoned second row is below the fourth: only the locked path could raise the
-- floor past it, and this transaction wrote the head.
SELECT results_eq(format($$SELECT head_id, floor_id FROM outbox.partition_heads
                           WHERE queue_id = %s AND partition_key = 'a'$$, :qid),
                  format('VALUES (%s::bigint, %s::bigint)', (:'a'::bigint[])[4], (:'a'::bigint[])[1]),
                  'the head at the fourth row, the floor where it was');
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'q'),
                  format('VALUES (%s::bigint)', (:'a'::bigint[])[4]),
                  'the fourth row is claimed from there');

SELECT * FROM finish();
ROLLBACK;
