-- Points the head of each given partition at its first deliverable row (the smallest id at or above
-- the partition's floor among unsent, not poisoned rows), parked until that row's lease or backoff
-- ends (not until a lease more than a day ahead: a clock since set back wrote it, and it counts as
-- over, see outbox._claim); creates missing heads. The caller must have written its own changes in an earlier
-- statement, so they are visible here.
-- A partition found empty loses its head, and a partition whose head search stepped over poisoned
-- rows gets its floor raised past them, but only with the head locked FOR UPDATE (skip, never
-- wait), deleted, and after a second look with a newer snapshot taken once the deletion is done: a
-- producer committing rows of the partition holds its head FOR KEY SHARE until it commits
-- (outbox.tg_queue__commit), so its rows never lose their head; one that finds the head locked by
-- us leaves a wake note, applied by a later claim. PostgreSQL can grant a producer's key-share
-- lock beside our FOR UPDATE (see the deletion below), and then only the deletion waits for it. When the head is busy an empty head (head_id NULL) is parked for a second and
-- looked at again by a later claim.
-- A head whose version this transaction wrote (a lock-mode batch that moved it in an earlier call,
-- or made it) is not locked either: a producer's FOR KEY SHARE SKIP LOCKED, which does not conflict
-- with the move, follows the head's update chain to its newest version and waits, whatever SKIP
-- LOCKED says, for a FOR UPDATE lock or a deletion found there, until the batch ends (issue 29).
-- It is pointed at what we found like a busy one, but an empty one is not parked: the first claim
-- after our commit deletes it, or moves it to a row a producer committed meanwhile.
-- Only READ COMMITTED gives the second look a newer snapshot: under REPEATABLE READ or SERIALIZABLE
-- every key counts as busy, so a head is never deleted nor a floor raised from an old snapshot.
-- A head moved on to a row with every row below it (from the floor) sent takes that row's id as its
-- floor, in READ COMMITTED, without the lock: no row of the key below it can still come, since a
-- row committed after the row we found, which is committed, gets a larger id (commit order,
-- docs/ordering.md), so claims and refreshes walk no index entries of the key's sent rows again
-- (before, every head move and every claim walked all of them from the key's first row: the
-- dead ones too while an xmin is held). Only a floor still as we read it is raised: one lowered
-- meanwhile (a wake note, a producer's fix) stays.
CREATE OR REPLACE FUNCTION outbox._refresh_heads(p_q outbox.queues, p_keys text[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  -- Each key's first pending row from its floor, poisoned or not (f), and, only when that one is
  -- poisoned, its first deliverable row past it (p): the head goes to the first deliverable row (n),
  -- and the key is "tidy" (empty, or poisoned rows to step over: floor and deletion want the lock,
  -- below) exactly when there is none or f is poisoned. One index scan per key in the usual case
  -- (a look for pending rows below the next one cost a second, with a heap fetch of the row just sent).
  -- %4$s: each key's floor when its head is gone (deleted by this transaction), NULL elements else.
  v_next_template constant text :=
    'SELECT k.key, n.id, n.attempt_count, fl.floor_id, fl.has_head, fh.xmin AS seen, fh.ctid AS head_tid,
            NULLIF(GREATEST(n.next_attempt_at, CASE WHEN n.leased_until <= $4 + interval ''1 day'' THEN n.leased_until END, $4), $4) AS parked,
            n.id IS NULL OR f.attempt_count >= $2 AS tidy
     FROM unnest($1::text[], %4$s) AS k(key, kept_floor)
     -- A join, read once per key: as a scalar subquery in a pulled-up LATERAL the planner copied
     -- the lookup into each of its five uses (15 of 24 buffers per key in a drain).
     LEFT JOIN outbox.partition_heads fh ON fh.queue_id = $3 AND fh.partition_key = k.key
     CROSS JOIN LATERAL (
       SELECT COALESCE(fh.floor_id, k.kept_floor, 0) AS floor_id, fh.partition_key IS NOT NULL AS has_head) fl
     LEFT JOIN LATERAL (
       SELECT t.id, t.attempt_count, t.next_attempt_at, t.leased_until
       FROM %1$s t
       WHERE t.%2$I = k.key::%3$s AND t.sent_at IS NULL AND t.id >= fl.floor_id
       ORDER BY t.id LIMIT 1) f ON true
     LEFT JOIN LATERAL (
       SELECT t.id, t.attempt_count, t.next_attempt_at, t.leased_until
       FROM %1$s t
       WHERE f.attempt_count >= $2
         AND t.%2$I = k.key::%3$s AND t.sent_at IS NULL AND t.attempt_count < $2 AND t.id > f.id
       ORDER BY t.id LIMIT 1) p ON true
     CROSS JOIN LATERAL (
       SELECT CASE WHEN f.attempt_count < $2 THEN f.id ELSE p.id END AS id,
              CASE WHEN f.attempt_count < $2 THEN f.attempt_count ELSE p.attempt_count END AS attempt_count,
              CASE WHEN f.attempt_count < $2 THEN f.next_attempt_at ELSE p.next_attempt_at END AS next_attempt_at,
              CASE WHEN f.attempt_count < $2 THEN f.leased_until ELSE p.leased_until END AS leased_until) n';
  v_next constant text := pg_catalog.format(v_next_template,
    p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type, 'NULL::bigint[]');
  v_tidy text[];
  v_tidy_pass text[];
  v_keys text[] := p_keys;
  v_stale text[];
  v_locked text[];
  -- The versions we locked; aligned with v_locked, their floors (NULL: the key had no head).
  v_locked_tids tid[];
  v_locked_floors bigint[];
  v_busy text[];
  -- Tidy keys whose head version this transaction wrote, from the xmin the pass read: a version
  -- of ours stays the newest until we end (no one else can write it meanwhile), and one of another
  -- transaction can not become ours, so no second read of the heads is needed.
  v_own text[];
  v_own_pass text[];
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  IF p_keys IS NULL OR pg_catalog.cardinality(p_keys) = 0 THEN
    RETURN;
  END IF;
  -- Point heads at their next row; partitions that are empty or stepped over poisoned rows are
  -- only collected here, so the common uncontended case writes each of them once, below.
  -- Heads that exist are updated in place, those that do not are made; but only a head still as
  -- this statement's snapshot saw it (its xmin), or still missing: another transaction that moved
  -- or made it meanwhile (a result of its row, an operator's poison_row, a producer's commit step)
  -- committed after our snapshot was taken, and what we found from that snapshot is older than
  -- what it wrote. Written over, the head went back to a row just sent, parked until that row's
  -- lease or backoff ended (up to max_delay), while the key's next row was ready and no claim
  -- looked at it. Such keys are looked at again, by a new statement with a newer snapshot (READ
  -- COMMITTED; in REPEATABLE READ and SERIALIZABLE the update fails with 40001 instead), a few
  -- times at most: what is left then is the other transaction's head, which a later claim, result
  -- or the repair pass moves on.
  -- Heads are updated (and deleted, below) at the ctid the statement read them at: a TID scan per
  -- key whatever the statistics say. Joined on the key, a plan the session made while the heads
  -- table was nearly empty (right after a crash, until autovacuum analyzed it again) read every
  -- head of the queue for each key: a rebuild part of 500 keys beside 14,500 heads took 316 ms,
  -- and longer as the heads grew.
  FOR pass IN 1..3 LOOP
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH next AS (%s),
       moved AS (
         UPDATE outbox.partition_heads h
         SET head_id = next.id, attempt_count = next.attempt_count, parked_until = next.parked,
             floor_id = CASE WHEN $5 AND h.floor_id >= next.floor_id THEN GREATEST(h.floor_id, next.id)
                             ELSE h.floor_id END
         FROM next
         WHERE next.id IS NOT NULL AND NOT next.tidy AND next.has_head
           AND h.ctid = next.head_tid AND h.xmin = next.seen
         RETURNING h.partition_key),
       made AS (
         INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
         SELECT $3, next.key, next.id, next.attempt_count, next.parked, CASE WHEN $5 THEN next.id ELSE 0 END
         FROM next WHERE next.id IS NOT NULL AND NOT next.tidy AND NOT next.has_head
         ON CONFLICT (queue_id, partition_key) DO NOTHING
         RETURNING h.partition_key)
       SELECT pg_catalog.array_agg(next.key ORDER BY next.key) FILTER (WHERE next.tidy),
              pg_catalog.array_agg(next.key ORDER BY next.key) FILTER (
                WHERE next.id IS NOT NULL AND NOT next.tidy
                  AND next.key NOT IN (SELECT moved.partition_key FROM moved)
                  AND next.key NOT IN (SELECT made.partition_key FROM made)),
              pg_catalog.array_agg(next.key) FILTER (
                WHERE $5 AND next.tidy AND next.has_head AND outbox._written_here(next.seen))
       FROM next', v_next),
      'text[], integer, integer, timestamptz, boolean',
      'TABLE(pgdrain_tidy text[], pgdrain_stale text[], pgdrain_own text[])')
      INTO v_tidy_pass, v_stale, v_own_pass USING v_keys, p_q.max_attempts, p_q.queue_id, v_now, v_read_committed;
    v_tidy := v_tidy || v_tidy_pass;
    v_own := v_own || v_own_pass;
    EXIT WHEN v_stale IS NULL OR NOT v_read_committed;
    v_keys := v_stale;
  END LOOP;
  IF v_tidy IS NULL THEN
    RETURN;
  END IF;

  IF v_read_committed THEN
    -- A partition with no head row has nothing a producer relies on (one that makes its head
    -- meanwhile waits for our insert, then leaves a wake note): it counts as locked.
    -- A locking probe per key (LATERAL), and a look for the head only where it failed (a scalar
    -- subquery): as OR NOT EXISTS, a plan made on a nearly empty heads table hashed every head of
    -- the queue on each call.
    SELECT pg_catalog.array_agg(u.k), pg_catalog.array_agg(l.tid) FILTER (WHERE l.held), pg_catalog.array_agg(l.floor_id)
      INTO v_locked, v_locked_tids, v_locked_floors
    FROM pg_catalog.unnest(v_tidy) AS u(k)
    LEFT JOIN LATERAL (SELECT true AS held, h.ctid AS tid, h.floor_id FROM outbox.partition_heads h
                       WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k
                         AND u.k <> ALL (COALESCE(v_own, '{}'))
                       FOR UPDATE SKIP LOCKED) l ON true
    WHERE l.held
       OR (SELECT h.partition_key FROM outbox.partition_heads h
           WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k) IS NULL;
  END IF;
  SELECT pg_catalog.array_agg(k) INTO v_busy
  FROM pg_catalog.unnest(v_tidy) AS k
  WHERE k <> ALL (COALESCE(v_locked, '{}'));

  -- Head busy (a producer is committing rows of the partition, or another claim holds it): point
  -- the head at what we found, the floor stays; an empty head is parked for a second and looked at
  -- again by a later claim (one of our own versions is not parked, see above).
  IF v_busy IS NOT NULL THEN
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH next AS (%s)
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, COALESCE(next.attempt_count, 0),
              CASE WHEN next.id IS NULL AND next.key <> ALL ($5) THEN $4 + interval ''1 second'' ELSE next.parked END
       FROM next WHERE next.id IS NOT NULL OR next.has_head
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until', v_next),
      'text[], integer, integer, timestamptz, text[]', 'void')
      USING v_busy, p_q.max_attempts, p_q.queue_id, v_now, COALESCE(v_own, '{}');
  END IF;
  IF v_locked IS NULL THEN
    RETURN;
  END IF;

  -- Under the exclusive lock, the locked heads are deleted first, in a statement of their own, and
  -- then looked at again with a newer snapshot (rows committed before the deletion ended are
  -- visible): empty heads stay deleted, the others are made again at their first deliverable row,
  -- with their floor raised to it (past poisoned rows). The deletion waits for a producer whose
  -- FOR KEY SHARE PostgreSQL granted beside our FOR UPDATE: heap_lock_tuple's key-share path reads
  -- the head's xmax (a claim's FOR NO KEY UPDATE, no conflict), lets go of the buffer lock, takes
  -- it again and only checks that the head was not updated meanwhile, so a FOR UPDATE taken in
  -- between is not seen (gocheck/refresh_key_share_race_test.go replays it with gdb).
  -- Such a producer holds the head, finds nothing to do and leaves no wake note. Looked at in the
  -- deleting statement, from a snapshot taken before the wait, its committed row was not seen and
  -- its key lost its head: the next producer of the key made a head with its own id as floor, and
  -- later rows were delivered first (bench/fifo/FINDINGS-s26.md, 4.3 s and 55 rows in lock mode).
  IF v_locked_tids IS NOT NULL THEN
    DELETE FROM outbox.partition_heads h WHERE h.ctid = ANY (v_locked_tids);
  END IF;
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH next AS (%s)
     INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
     SELECT $3, next.key, next.id, next.attempt_count, next.parked, next.id
     FROM next WHERE next.id IS NOT NULL
     ON CONFLICT (queue_id, partition_key) DO UPDATE
       SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
           parked_until = EXCLUDED.parked_until, floor_id = EXCLUDED.floor_id',
    pg_catalog.format(v_next_template, p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type,
                      '$5::bigint[]')),
    'text[], integer, integer, timestamptz, bigint[]', 'void')
    USING v_locked, p_q.max_attempts, p_q.queue_id, v_now, v_locked_floors;
END;
$$;
