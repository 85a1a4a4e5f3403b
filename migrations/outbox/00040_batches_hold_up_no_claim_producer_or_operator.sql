-- +goose Up
-- +goose StatementBegin
-- Applies the wake notes producers left for a queue (outbox.partition_wakes, see
-- outbox.tg_queue__commit): a committed row of the note's key whose head a claim held at the
-- time. Each noted partition gets what the producer could not write itself: a head if it has
-- none, an empty head pointed at the row and woken, a floor lowered to the row. Notes of a head
-- that is still held stay for a later claim; a bounded number per call, oldest first.
-- Returns the keys it applied, for the caller to refresh.
-- Never waits for another claim: a head that another open transaction is making (a lock-mode batch
-- that applied a note of the key keeps its new head uncommitted for the whole batch) would hold
-- this insert on its index entry until that batch ends, and every claim of the queue behind it,
-- and two batches each making a head the other wants deadlocked. The insert gives up after
-- lock_timeout instead, in a block of its own (entered only when notes make heads), then key by
-- key, and the notes of a head it could not make stay for a later claim.
CREATE OR REPLACE FUNCTION outbox._apply_wakes(p_q outbox.queues)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET lock_timeout = '1ms'
AS $$
DECLARE
  v_notes tid[];
  v_keys text[];
  v_lows bigint[];
  v_fixed text[];
  v_made text[];
BEGIN
  SELECT pg_catalog.array_agg(w.ctid) INTO v_notes
  FROM (SELECT x.ctid FROM outbox.partition_wakes x WHERE x.queue_id = p_q.queue_id
        LIMIT 256 FOR UPDATE SKIP LOCKED) w;
  IF v_notes IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT pg_catalog.array_agg(s.k ORDER BY s.k), pg_catalog.array_agg(s.lo ORDER BY s.k)
    INTO v_keys, v_lows
  FROM (SELECT w.partition_key AS k, pg_catalog.min(w.low_id) AS lo FROM outbox.partition_wakes w
        WHERE w.ctid = ANY (v_notes) GROUP BY 1) s;

  -- Heads we can lock now (or that do not exist: made here) take the note; the others wait.
  WITH held AS (
    SELECT h.partition_key FROM outbox.partition_heads h
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
    FOR NO KEY UPDATE SKIP LOCKED),
  fixed AS (
    UPDATE outbox.partition_heads h
    SET head_id = COALESCE(h.head_id, u.lo),
        parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
        floor_id = LEAST(h.floor_id, u.lo)
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k AND u.k IN (SELECT held.partition_key FROM held)
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(fixed.partition_key) INTO v_fixed FROM fixed;

  IF EXISTS (SELECT 1 FROM unnest(v_keys) AS u(k)
             WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                               WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)) THEN
    BEGIN
      WITH made AS (
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        -- Floor 0: notes of the key beyond this call's may hold smaller ids.
        SELECT p_q.queue_id, u.k, u.lo, 0
        FROM unnest(v_keys, v_lows) AS u(k, lo)
        WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                          WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
        ORDER BY u.k
        ON CONFLICT (queue_id, partition_key) DO NOTHING
        RETURNING h.partition_key)
      SELECT pg_catalog.array_agg(made.partition_key) INTO v_made FROM made;
    EXCEPTION WHEN lock_not_available THEN
      -- One key by one, so that the head another transaction is making holds back only its key.
      v_made := NULL;
      FOR i IN 1..pg_catalog.cardinality(v_keys) LOOP
        BEGIN
          INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
          SELECT p_q.queue_id, v_keys[i], v_lows[i], 0
          WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                            WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_keys[i])
          ON CONFLICT (queue_id, partition_key) DO NOTHING;
          IF FOUND THEN
            v_made := v_made || v_keys[i];
          END IF;
        EXCEPTION WHEN lock_not_available THEN
          NULL;
        END;
      END LOOP;
    END;
  END IF;

  v_fixed := v_fixed || v_made;
  DELETE FROM outbox.partition_wakes w
  WHERE w.ctid = ANY (v_notes) AND w.partition_key = ANY (v_fixed);
  RETURN v_fixed;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Points the head of each given partition at its first deliverable row (the smallest id at or above
-- the partition's floor among unsent, not poisoned rows), parked until that row's lease or backoff
-- ends; creates missing heads. The caller must have written its own changes in an earlier
-- statement, so they are visible here.
-- A partition found empty loses its head, and a partition whose head search stepped over poisoned
-- rows gets its floor raised past them, but only with the head locked FOR UPDATE (skip, never
-- wait) and after a second look with a newer snapshot: a producer committing rows of the
-- partition holds its head FOR KEY SHARE until it commits (outbox.tg_queue__commit), so its
-- rows never lose their head; one that finds the head locked by us leaves a wake note, applied by
-- a later claim. When the head is busy an empty head (head_id NULL) is parked for a second and
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
  v_next constant text := pg_catalog.format(
    'SELECT k.key, n.id, n.attempt_count, fl.floor_id, fl.has_head, fh.xmin AS seen,
            NULLIF(GREATEST(n.next_attempt_at, n.leased_until, $4), $4) AS parked,
            n.id IS NULL OR f.attempt_count >= $2 AS tidy
     FROM pg_catalog.unnest($1::text[]) AS k(key)
     -- A join, read once per key: as a scalar subquery in a pulled-up LATERAL the planner copied
     -- the lookup into each of its five uses (15 of 24 buffers per key in a drain).
     LEFT JOIN outbox.partition_heads fh ON fh.queue_id = $3 AND fh.partition_key = k.key
     CROSS JOIN LATERAL (
       SELECT COALESCE(fh.floor_id, 0) AS floor_id, fh.partition_key IS NOT NULL AS has_head) fl
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
              CASE WHEN f.attempt_count < $2 THEN f.leased_until ELSE p.leased_until END AS leased_until) n',
    p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type);
  v_tidy text[];
  v_tidy_pass text[];
  v_keys text[] := p_keys;
  v_stale text[];
  v_locked text[];
  v_busy text[];
  v_own text[];
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
           AND h.queue_id = $3 AND h.partition_key = next.key AND h.xmin = next.seen
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
                  AND next.key NOT IN (SELECT made.partition_key FROM made))
       FROM next', v_next),
      'text[], integer, integer, timestamptz, boolean', 'TABLE(pgdrain_tidy text[], pgdrain_stale text[])')
      INTO v_tidy_pass, v_stale USING v_keys, p_q.max_attempts, p_q.queue_id, v_now, v_read_committed;
    v_tidy := v_tidy || v_tidy_pass;
    EXIT WHEN v_stale IS NULL OR NOT v_read_committed;
    v_keys := v_stale;
  END LOOP;
  IF v_tidy IS NULL THEN
    RETURN;
  END IF;

  IF v_read_committed THEN
    SELECT pg_catalog.array_agg(h.partition_key) INTO v_own
    FROM outbox.partition_heads h
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_tidy) AND outbox._written_here(h.xmin);
    -- A partition with no head row has nothing a producer relies on (one that makes its head
    -- meanwhile waits for our insert, then leaves a wake note): it counts as locked.
    SELECT pg_catalog.array_agg(k) INTO v_locked
    FROM pg_catalog.unnest(v_tidy) AS k
    WHERE k IN (SELECT h.partition_key FROM outbox.partition_heads h
                WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_tidy)
                  AND h.partition_key <> ALL (COALESCE(v_own, '{}'))
                FOR UPDATE SKIP LOCKED)
       OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads h
                      WHERE h.queue_id = p_q.queue_id AND h.partition_key = k);
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

  -- Under the exclusive lock, with a newer snapshot (rows committed before the lock are visible):
  -- delete empty heads, raise floors past poisoned rows.
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH next AS (%s),
     gone AS (
       DELETE FROM outbox.partition_heads h USING next
       WHERE next.id IS NULL AND h.queue_id = $3 AND h.partition_key = next.key)
     INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
     SELECT $3, next.key, next.id, next.attempt_count, next.parked, next.id
     FROM next WHERE next.id IS NOT NULL
     ON CONFLICT (queue_id, partition_key) DO UPDATE
       SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
           parked_until = EXCLUDED.parked_until, floor_id = EXCLUDED.floor_id', v_next),
    'text[], integer, integer, timestamptz', 'void')
    USING v_locked, p_q.max_attempts, p_q.queue_id, v_now;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records outcomes for rows, the common core of apply_result(s) (p_tokens given: only rows whose
-- lease_token still matches) and settle_locked (p_tokens NULL: the caller checked it holds the
-- row locks). A row that does not qualify is not touched at all. Every outcome clears lease and
-- token together. 'transient' adds an attempt with backoff; on a partitioned queue it is capped
-- at max_attempts - 1 so a partition head is never poisoned by a transient failure. 'permanent'
-- poisons (attempt_count = max_attempts) unless the queue's policy is 'retry'.
-- A backoff is counted from the clock when the outcome is recorded, not from now() (the
-- transaction start): in lock mode the claiming transaction has been open for the whole delivery,
-- and a backoff counted from its start could be over before it is written. sent_at is a record,
-- not a deadline: it stays now(), the time of the transaction that made the row sent. A sent row's
-- last_error is cleared (its attempt_count still says how many attempts failed before): a delivered
-- row showing an old error read as a failure (issue 32).
-- Rows it poisons are kept poisoned if create_queue raises max_attempts before this commits
-- (outbox._keep_poisoned).
-- An error is kept to its first 4000 characters (the Go drainer sends at most 4000 bytes; other
-- clients sent whole error pages, megabytes read back by every stats and console call).
-- p_retry_at (NULL, or aligned with p_ids; NULL elements = backoff) sets a transient row's next
-- attempt to a time the caller chose (a peer's Retry-After), never earlier than the clock.
-- A run (several rows of a key in one call, lease mode) is recorded up to its first row that is
-- refused while still deliverable (its token is another worker's now: the lease ran out and the row
-- was claimed again, or an operator released it): the key's later rows are refused too. Recorded,
-- they were sent while a row before them was still to be delivered, which would then come after
-- them. On a partitioned queue a lease-mode call first locks the rows that are still the caller's,
-- in id order, and reads them at their latest version (still_ours, a CTE of its own: a condition
-- outside a locking subquery is pushed below the lock and tested on the snapshot's version), then
-- updates only those; the others still deliverable (refused: read only for the rows still_ours
-- left out, usually none) hold back their key's later rows. So a claim of a run's row that
-- commits while the call waits for it refuses the rows after it, though the statement's snapshot
-- never saw it; and every row lock the call
-- waits for is taken in id order, before any update: two calls holding tokens of the same rows (a
-- stale worker's and the one that claimed them again) cannot deadlock, whatever else holds their
-- rows (a lock-mode batch, an operator). A row that changed in any other way since the snapshot
-- (sent or poisoned by someone else meanwhile) refuses the rows after it too: they are delivered
-- again, never out of order.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[], p_retry_at timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_done bigint[];
  v_keys text[];
  v_poisoned bigint[];
  v_cap integer := CASE WHEN p_q.partition_column IS NULL THEN p_q.max_attempts ELSE p_q.max_attempts - 1 END;
  v_clock timestamptz := pg_catalog.clock_timestamp();
BEGIN
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH input AS (
       SELECT u.id, u.token, u.outcome, u.err, u.retry_at
       FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $11::timestamptz[])
         AS u(id, token, outcome, err, retry_at)),%4$s
     upd AS (
       -- The attempts a failure leaves are computed from the row being updated, not read in a join
       -- before it: one index probe per row instead of two.
       UPDATE %1$s t SET
         sent_at = CASE WHEN i.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = CASE WHEN i.outcome = ''sent'' THEN t.attempt_count ELSE %3$s END,
         next_attempt_at = CASE
           WHEN i.outcome = ''sent'' THEN t.next_attempt_at
           WHEN %3$s >= $6 THEN NULL
           WHEN i.retry_at IS NOT NULL THEN GREATEST(i.retry_at, $10)
           ELSE $10 + outbox._backoff(%3$s, $8, $9) END,
         last_error = CASE WHEN i.outcome = ''sent'' THEN NULL ELSE pg_catalog.left(i.err, 4000) END,
         leased_until = NULL,
         lease_token = NULL
       FROM input i
       WHERE t.id = i.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = i.token)%5$s
       RETURNING t.id, %2$s AS key, t.attempt_count >= $6 AS poisoned)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key),
            pg_catalog.array_agg(upd.id) FILTER (WHERE upd.poisoned)
     FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END,
    -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts while it was
    -- leased stays poisoned.
    '(CASE WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
           ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END)',
    CASE WHEN p_q.partition_column IS NOT NULL THEN pg_catalog.format('
     still_ours AS MATERIALIZED (
       SELECT r.id FROM input j JOIN %1$s r ON r.id = j.id
       WHERE $2 IS NOT NULL AND r.sent_at IS NULL AND r.lease_token = j.token
       ORDER BY r.id
       FOR NO KEY UPDATE OF r),
     refused AS MATERIALIZED (
       SELECT r.%2$I::text AS key, r.id FROM input j JOIN %1$s r ON r.id = j.id
       WHERE $2 IS NOT NULL AND j.id NOT IN (SELECT o.id FROM still_ours o)
         AND r.sent_at IS NULL AND r.attempt_count < $6),',
      p_q.table_oid::regclass, p_q.partition_column) ELSE '' END,
    CASE WHEN p_q.partition_column IS NOT NULL THEN pg_catalog.format('
         AND ($2 IS NULL OR t.id IN (SELECT o.id FROM still_ours o))
         AND NOT EXISTS (SELECT 1 FROM refused f WHERE f.key = t.%I::text AND f.id < t.id)', p_q.partition_column)
         ELSE '' END),
    'bigint[], uuid[], text[], text[], text, integer, integer, interval, interval, timestamptz, timestamptz[]',
    'TABLE(pgdrain_ids bigint[], pgdrain_keys text[], pgdrain_poisoned bigint[])')
    INTO v_done, v_keys, v_poisoned
    USING p_ids, p_tokens, p_outcomes, p_errors, p_q.permanent_policy, p_q.max_attempts, v_cap,
          p_q.backoff_min, p_q.backoff_max, v_clock, p_retry_at;

  IF v_poisoned IS NOT NULL THEN
    PERFORM outbox._keep_poisoned(p_q, v_poisoned);
  END IF;
  IF p_q.partition_column IS NOT NULL AND v_keys IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  RETURN COALESCE(v_done, '{}');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Keeps poisoned the rows p_ids that the caller's transaction has just poisoned at the limit it read
-- (attempt_count = p_q.max_attempts) when outbox.create_queue raises max_attempts before it commits.
-- create_queue lifts the rows already poisoned to the new limit, but not rows poisoned by a
-- transaction still open: its statement does not see them, and at the old limit they would be
-- pending again once that transaction commits, in front of the rows of their keys delivered after
-- them (per-key order broken; found with a lock-mode batch that settled a row 'permanent' and
-- stayed open while the owner ran create_queue). The queue's registration row, locked FOR SHARE here
-- until the caller commits, orders the two: create_queue writes it before it lifts, so either it
-- waits for the caller and its lift sees these rows, or the caller waits for it, reads the new
-- limit and lifts them itself. Only a call that poisoned a row comes here.
CREATE OR REPLACE FUNCTION outbox._keep_poisoned(p_q outbox.queues, p_ids bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_max integer;
BEGIN
  SELECT q.max_attempts INTO v_max FROM outbox.queues q
  WHERE q.queue_id = p_q.queue_id AND q.table_oid = p_q.table_oid
  FOR SHARE;
  IF v_max > p_q.max_attempts THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = $1
       WHERE t.id = ANY ($2) AND t.sent_at IS NULL AND t.attempt_count >= $3 AND t.attempt_count < $1',
      p_q.table_oid::regclass)
      USING v_max, p_ids, p_q.max_attempts;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The common core of the operators' row actions (poison_row, retry_row, dismiss_poisoned): one
-- statement that takes the rows still in the state the operator saw, changes them, and logs each
-- in outbox.operator_actions (with the session's login role, the reason and the attempt count it had); then the partitions'
-- heads follow (outbox._refresh_heads) and an idle drainer is woken when a row became claimable.
-- Fenced: a row that moved on (sent, requeued to a new id, another attempt recorded, poisoned or
-- not as the action needs) is not taken, nor one a worker delivers right now (a live lease, or a
-- lock-mode claim's row lock: SKIP LOCKED, never waiting). An expired lease's token is cleared with
-- the change, so that worker's late result is refused like any other after its lease ran out.
--   poison   pending, attempt_count = p_attempt_count: poisoned (attempt_count = max_attempts), its
--            key's later rows go past it; requeue_poisoned delivers it later, at the tail of its key.
--   retry    pending and backing off, attempt_count = p_attempt_count: due now.
--   dismiss  poisoned: never delivered, kept as history (sent_at is set, so nothing counts it as
--            pending or poisoned; purge_sent removes it with the sent rows), last_error says so.
-- poison and dismiss put their note in front of the row's last error, kept to 4000 characters in
-- all (as outbox._record keeps an error): a row poisoned, requeued and poisoned again many times
-- does not carry every earlier note.
-- Returns the ids changed.
CREATE OR REPLACE FUNCTION outbox._operator_act(p_q outbox.queues, p_action text, p_ids bigint[],
                                                p_attempt_count integer, p_reason text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
-- (enable_seqscan = off makes a plan that cannot avoid a scan cost about 1e10, past the JIT
-- thresholds: it was compiled on every call, 0.15-1.6 s.)
SET jit = off
AS $$
DECLARE
  v_note constant text := pg_catalog.format('%s by %s: %s',
    CASE p_action WHEN 'poison' THEN 'poisoned' WHEN 'dismiss' THEN 'dismissed' ELSE 'retried' END,
    session_user, p_reason);
  v_ids bigint[];
  v_keys text[];
BEGIN
  EXECUTE pg_catalog.format(
    'WITH r AS (
       SELECT t.id, t.attempt_count FROM %1$s t
       WHERE t.id = ANY ($1) AND t.sent_at IS NULL AND %4$s
         AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.clock_timestamp())
       FOR UPDATE OF t SKIP LOCKED),
     u AS (
       UPDATE %1$s t SET %5$s, leased_until = NULL, lease_token = NULL
       FROM r WHERE t.id = r.id
       RETURNING t.id, %2$s AS event_id, %3$s AS key, r.attempt_count),
     logged AS (
       INSERT INTO outbox.operator_actions (queue, action, row_id, event_id, partition_key, attempt_count, reason)
       SELECT $5, $6, u.id, u.event_id, u.key, u.attempt_count, $7 FROM u
       RETURNING row_id, partition_key)
     SELECT pg_catalog.array_agg(l.row_id ORDER BY l.row_id), pg_catalog.array_agg(DISTINCT l.partition_key)
     FROM logged l',
    p_q.table_oid,
    outbox._event_id_of(p_q),
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END,
    CASE p_action
      WHEN 'poison' THEN 't.attempt_count = $2 AND t.attempt_count < $3'
      WHEN 'retry' THEN 't.attempt_count = $2 AND t.attempt_count < $3 AND t.next_attempt_at > pg_catalog.clock_timestamp()'
      ELSE 't.attempt_count >= $3' END,
    CASE p_action
      WHEN 'poison' THEN 'attempt_count = $3, next_attempt_at = NULL, last_error = pg_catalog.left($4 || COALESCE('' (last error: '' || t.last_error || '')'', ''''), 4000)'
      WHEN 'retry' THEN 'next_attempt_at = NULL'
      ELSE 'sent_at = pg_catalog.now(), next_attempt_at = NULL, last_error = pg_catalog.left($4 || COALESCE('' (last error: '' || t.last_error || '')'', ''''), 4000)' END)
    INTO v_ids, v_keys
    USING p_ids, p_attempt_count, p_q.max_attempts, v_note, p_q.queue, p_action, p_reason;
  IF v_ids IS NULL THEN
    RETURN '{}';
  END IF;
  RAISE LOG 'pgdrain: % % row(s) % of queue %: %', session_user,
    CASE p_action WHEN 'poison' THEN 'poisoned' WHEN 'dismiss' THEN 'dismissed' ELSE 'retried' END,
    v_ids, p_q.queue, COALESCE(p_reason, '(no reason given)');
  IF p_action = 'poison' THEN
    PERFORM outbox._keep_poisoned(p_q, v_ids);
  END IF;
  IF p_q.partition_column IS NOT NULL AND p_action <> 'dismiss' THEN
    -- Heads another transaction holds (a lock-mode batch delivering the key's head row) are
    -- skipped, never waited for: that batch moves its head when it settles, and a claim that finds
    -- a head at a row no longer deliverable refreshes it.
    SELECT pg_catalog.array_agg(k) INTO v_keys
    FROM pg_catalog.unnest(pg_catalog.array_remove(v_keys, NULL)) AS k
    WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads h WHERE h.queue_id = p_q.queue_id AND h.partition_key = k)
       OR k IN (SELECT h.partition_key FROM outbox.partition_heads h
                WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
                FOR NO KEY UPDATE SKIP LOCKED);
    PERFORM outbox._refresh_heads(p_q, v_keys);
  END IF;
  IF p_action = 'retry' OR p_q.partition_column IS NOT NULL AND p_action = 'poison' THEN
    -- Claimable now: the row itself, or the row behind a skipped head.
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the TRUNCATE
-- trigger and either the NOTIFY trigger (unpartitioned) or the trigger that feeds the commit step
-- (partitioned, whose commit step notifies); then registers the queue. Idempotent: calling it
-- again with new settings updates them; the partition column can not change. An adopted table keeps its rows; missing lease columns are added as
-- NULL = "free". What the table enforces on producers (CHECKs, column privileges) is
-- outbox._guard_queue_table.
-- Registration follows the table: when the registered table was dropped (or dropped and made
-- again) outside drop_queue, the new table is registered under the same queue_id and every piece
-- of state derived from the old one (partition heads, built-mark, clocks) is dropped first; heads
-- are then rebuilt from the new table's rows.
-- A partitioned queue needs the sequence its ids come from (outbox.queues.id_sequence): the commit
-- step renumbers late rows with it.
-- max_delay bounds every caller-chosen next attempt (enqueue's deliver_at, a worker's retry_at, a
-- plain INSERT of next_attempt_at: outbox._check_delay and the table's CHECK made by
-- outbox._guard_next_attempt_at), so nobody can park a key for ever.
-- A created table gets fillfactor 50, so writing a lease is a HOT update (no index touched): a row
-- is written twice, leased and then sent, and the sent version (which leaves the partial indexes)
-- also takes room on the page; at 80, 10-23% of the updates of a drain were HOT (of 50% possible),
-- at 50 47-48%, with a fifth less WAL and a table no larger after its drain. And autovacuum
-- settings for a table that is mostly empty and churns.
CREATE OR REPLACE FUNCTION outbox.create_queue(
  queue text,
  partition_column text DEFAULT NULL,
  max_attempts integer DEFAULT 10,
  backoff_min interval DEFAULT '1 second',
  backoff_max interval DEFAULT '30 seconds',
  permanent_policy text DEFAULT 'poison',
  channel text DEFAULT NULL,
  max_delay interval DEFAULT '7 days')
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'create_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_schema text := pg_catalog.split_part(v_name, '.', 1);
  v_table text := pg_catalog.split_part(v_name, '.', 2);
  v_col text := pg_catalog.lower(partition_column);
  -- The default channel names the table; one too long for a channel (63 characters) keeps its
  -- first 54 and a hash of the whole name.
  v_channel text := COALESCE(channel, CASE
    WHEN pg_catalog.length('pgdrain_' || v_schema || '_' || v_table) <= 63 THEN 'pgdrain_' || v_schema || '_' || v_table
    ELSE pg_catalog.left('pgdrain_' || v_schema || '_' || v_table, 54) || '_' || pg_catalog.left(pg_catalog.md5(v_name), 8) END);
  -- Index names: the table's, or for a table name over 40 characters its first 31 and a hash
  -- (two long names alike in their first 40 made one index name: 42P07 for the second queue).
  v_index_base text := CASE WHEN pg_catalog.length(v_table) <= 40 THEN v_table
    ELSE pg_catalog.left(v_table, 31) || '_' || pg_catalog.left(pg_catalog.md5(v_table), 8) END;
  v_rel regclass;
  v_old outbox.queues;
  v_type text;
  v_queue_id integer;
  v_missing text;
  v_has_nulls boolean;
  v_sequence regclass;
  v_other text;
  v_new_table boolean;
  v_created boolean := false;
BEGIN
  IF partition_column IS NOT NULL AND partition_column !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must be a plain column name, got %L', partition_column));
  END IF;
  IF v_col IN ('id', 'event_type', 'payload', 'created_at', 'attempt_count', 'next_attempt_at',
               'sent_at', 'leased_until', 'lease_token', 'last_error', 'event_id', 'headers') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF v_col IN ('tableoid', 'xmin', 'cmin', 'xmax', 'cmax', 'ctid') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be a system column, got %L', partition_column));
  END IF;
  IF v_schema IN ('outbox', 'alr', 'core') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of pgdrain''s own schema %s, got %s', v_schema, v_name));
  END IF;
  IF v_schema = 'information_schema' OR v_schema LIKE 'pg\_%' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of the system schema %s, got %s', v_schema, v_name));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  PERFORM outbox._check_span(fn, 'backoff_min', backoff_min);
  PERFORM outbox._check_span(fn, 'backoff_max', backoff_max);
  PERFORM outbox._check_span(fn, 'max_delay', max_delay);
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_min > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('backoff_min must be at most 1 day, got %s', backoff_min));
  END IF;
  IF backoff_max IS NULL OR backoff_max < backoff_min OR backoff_max > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_max must be between backoff_min (%s) and 1 day, got %s',
      backoff_min, COALESCE(backoff_max::text, 'NULL')));
  END IF;
  IF max_delay IS NULL OR max_delay < backoff_max OR max_delay > interval '3650 days' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_delay must be between backoff_max (%s) and 3650 days, got %s',
      backoff_max, COALESCE(max_delay::text, 'NULL')));
  END IF;
  IF permanent_policy IS NULL OR permanent_policy NOT IN ('poison', 'retry') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'permanent_policy must be ''poison'' or ''retry'', got %L', permanent_policy));
  END IF;
  IF permanent_policy = 'retry' AND v_col IS NOT NULL THEN
    PERFORM outbox._invalid(fn,
      'permanent_policy ''retry'' is not allowed with a partition_column: an event that can never '
      'apply would wedge its partition forever');
  END IF;
  IF v_channel !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'channel must be a plain name of at most 63 characters, got %L', v_channel));
  END IF;
  v_channel := pg_catalog.lower(v_channel);

  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = v_schema) THEN
    RAISE EXCEPTION '%: schema % does not exist', fn, v_schema USING ERRCODE = '3F000';
  END IF;
  v_rel := pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, v_table));

  -- The registration is this table's only while its oid is the table's; a registration whose
  -- table was dropped (and maybe made again) is stale, and the new table is a new queue.
  SELECT * INTO v_old FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF FOUND AND v_old.table_oid = v_rel AND v_old.partition_column IS DISTINCT FROM v_col THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column of registered queue %s is %s and can not change to %s (drop_queue first)',
      v_name, COALESCE(v_old.partition_column, 'NULL'), COALESCE(v_col, 'NULL')));
  END IF;
  -- The registered table renamed away, another made under the queue's name: its producers write
  -- rows the queue never reads, and the old table still holds the queue's. Refused before anything
  -- changes (its heads trigger kept the old one's function: "cannot drop function").
  IF v_old.queue_id IS NOT NULL AND v_old.table_oid IS DISTINCT FROM v_rel
     AND pg_catalog.pg_table_is_visible(v_old.table_oid) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is registered for table %s, which still exists (renamed?): rename it back to %s, or drop_queue(%L) first',
      v_name, v_old.table_oid::regclass, v_name, v_name));
  END IF;
  IF v_rel IS NOT NULL THEN
    SELECT q.queue INTO v_other FROM outbox.queues q WHERE q.table_oid = v_rel AND q.queue <> v_name;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'table %s is already registered as queue %s (renamed?); drop_queue(%L) first', v_name, v_other, v_other));
    END IF;
  END IF;
  v_new_table := v_old.queue_id IS NULL OR v_old.table_oid IS DISTINCT FROM v_rel;

  IF v_rel IS NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TABLE %I.%I (
         id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
         event_type text NOT NULL,
         payload jsonb NOT NULL,
         created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
         attempt_count integer NOT NULL DEFAULT 0,
         next_attempt_at timestamptz,
         sent_at timestamptz,
         leased_until timestamptz,
         lease_token uuid,
         last_error text,
         event_id uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
         headers jsonb%s
       ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
               autovacuum_vacuum_insert_scale_factor = 0.01)',
      v_schema, v_table,
      CASE WHEN v_col IS NULL THEN '' ELSE pg_catalog.format(', %I text NOT NULL', v_col) END);
    v_rel := pg_catalog.format('%I.%I', v_schema, v_table)::regclass;
    v_created := true;
  ELSE
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = v_rel) NOT IN ('r', 'p') THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but is not a table', v_name));
    END IF;
    -- A partition is delivered through its partitioned table, and an inheritance parent's
    -- statements read its children's rows too: claims would hand them out while their own heads,
    -- triggers and indexes are not pgdrain's.
    IF (SELECT c.relispartition FROM pg_catalog.pg_class c WHERE c.oid = v_rel) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s is a partition of %s: register the partitioned table instead', v_name,
        (SELECT i.inhparent::regclass FROM pg_catalog.pg_inherits i WHERE i.inhrelid = v_rel)));
    END IF;
    SELECT pg_catalog.string_agg(i.inhrelid::regclass::text, ', ' ORDER BY i.inhrelid) INTO v_other
    FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = v_rel AND NOT c.relispartition;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s must not have inheritance children (their rows would be claimed through it), got %s', v_name, v_other));
    END IF;
    -- Adopt: the columns the application already writes must be there with the right types.
    SELECT pg_catalog.string_agg(pg_catalog.format('%s %s', r.col, r.typ), ', ') INTO v_missing
    FROM (VALUES ('id', 'bigint'), ('event_type', 'text'), ('payload', 'jsonb'),
                 ('created_at', 'timestamp with time zone')) AS r(col, typ)
    WHERE NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = v_rel AND a.attname = r.col AND NOT a.attisdropped
        AND pg_catalog.format_type(a.atttypid, a.atttypmod) = r.typ);
    IF v_missing IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s exists but lacks required columns (or has other types): %s', v_name, v_missing));
    END IF;
    IF NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_index i
      WHERE i.indrelid = v_rel AND i.indisprimary AND i.indnatts = 1
        AND i.indkey[0] = (SELECT a.attnum FROM pg_catalog.pg_attribute a
                           WHERE a.attrelid = v_rel AND a.attname = 'id')) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but id is not its primary key', v_name));
    END IF;
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row. Only
    -- when one is missing: ALTER TABLE locks the table even when it adds nothing, and create_queue
    -- run again on a registered queue (deploy scripts do) would hold up its producers and claims.
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = v_rel AND NOT a.attisdropped
          AND a.attname IN ('attempt_count', 'next_attempt_at', 'sent_at', 'leased_until', 'lease_token',
                            'last_error', 'headers')) < 7 THEN
      EXECUTE pg_catalog.format(
        'ALTER TABLE %s
           ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
           ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
           ADD COLUMN IF NOT EXISTS sent_at timestamptz,
           ADD COLUMN IF NOT EXISTS leased_until timestamptz,
           ADD COLUMN IF NOT EXISTS lease_token uuid,
           ADD COLUMN IF NOT EXISTS last_error text,
           ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    END IF;
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order. A column
      -- already NOT NULL (a registered queue's) is neither read nor altered.
      IF NOT (SELECT a.attnotnull FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col) THEN
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
          INTO STRICT v_has_nulls;
        IF v_has_nulls THEN
          PERFORM outbox._invalid(fn, pg_catalog.format(
            'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
        END IF;
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
      END IF;
    END IF;
  END IF;

  IF v_col IS NOT NULL THEN
    SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO v_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col;
  END IF;

  -- Renumbering late rows at commit (per-key commit order) takes new ids from this sequence.
  v_sequence := outbox._id_sequence(v_rel);
  IF v_col IS NOT NULL AND v_sequence IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is partitioned, so its id must come from an ascending sequence (identity, serial or '
      'DEFAULT nextval(''a_sequence'')): per-key commit order renumbers late rows with it', v_name));
  END IF;

  -- Everything derived from the old table goes before the new one is registered.
  IF v_old.queue_id IS NOT NULL AND v_new_table THEN
    DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_old.queue_id;
  END IF;

  -- clock_base: every id the sequence gave out so far counts as committed for per-key commit order
  -- (sessions with a cached sequence may still hand out smaller ones; their rows are then late).
  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base, max_delay)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0), create_queue.max_delay)
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence, max_delay = EXCLUDED.max_delay,
        clock_base = CASE WHEN q.table_oid = EXCLUDED.table_oid THEN q.clock_base ELSE EXCLUDED.clock_base END
  RETURNING q.queue_id INTO v_queue_id;

  -- A larger max_attempts does not make poisoned rows deliverable again: on a partitioned queue they
  -- would come back in front of what followed them in their keys (a 'register' after the
  -- 'unregister' delivered past it). They stay poisoned, at the new limit, until requeue_poisoned
  -- moves them to the tail of their keys. Read through the claim index (attempt_count, id).
  -- After the registration is written (its row locked until we commit): a transaction that
  -- poisoned rows at the old limit and is still open holds that row FOR SHARE
  -- (outbox._keep_poisoned), so the write above waited for it to commit and this statement sees
  -- its rows; one that poisons from now on waits for us, then lifts its rows itself.
  IF NOT v_new_table AND create_queue.max_attempts > v_old.max_attempts THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = $1, next_attempt_at = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $2 AND t.attempt_count < $1', v_rel)
      USING create_queue.max_attempts, v_old.max_attempts;
  END IF;

  -- The two required indexes, unless an equivalent one (any name) is already there.
  IF v_col IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'partition') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (%I, id) WHERE sent_at IS NULL',
                              v_index_base || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              v_index_base || '_pgdrain_claim', v_rel);
  END IF;

  -- CHECKs, the producers' column privileges (plain INSERT of an event, RETURNING id; the heads
  -- trigger runs as owner) and the TRUNCATE trigger.
  PERFORM outbox._guard_queue_table(v_rel, v_col, NOT v_created);
  PERFORM outbox._guard_next_attempt_at(v_rel, create_queue.max_delay,
                                        v_new_table OR v_old.max_delay IS DISTINCT FROM create_queue.max_delay, v_created);

  -- The NOTIFY trigger wakes drainers of an unpartitioned queue; a partitioned queue's rows become
  -- claimable at commit, where its commit step notifies (outbox._commit_keys). Both as
  -- outbox.set_notify last said (a registration keeps it).
  PERFORM outbox._install_notify_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
  -- An unpartitioned queue has no heads triggers (nor its function); a partitioned one's are
  -- replaced in place (outbox._install_heads_trigger). Dropped only when there: DROP TRIGGER locks
  -- the table even when there is nothing to drop.
  IF v_col IS NULL THEN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = v_rel AND t.tgname IN ('pgdrain_heads', 'pgdrain_snapshot')) THEN
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    END IF;
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  END IF;
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    IF v_new_table THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Finds the pending deliverable rows of a partitioned queue that no claim can reach, and (unless
-- dry_run) makes them reachable again. Partition heads, floors and parks are a cache of the queue
-- table (outbox.partition_heads); this checks the cache against the table, one key at a time:
--   missing_head     the key has a deliverable row but no head: no claim would ever look at it;
--   floor_above_row  the head's floor (below it, everything is taken to be sent or poisoned) is above
--                    the key's first deliverable row: that row would never be found;
--   parked_past_due  the head is parked (lease or backoff) more than a second past the time its first
--                    deliverable row is due;
--   stale_notes      (no key) a transaction that wrote the queue ended without its commit step
--                    (pgdrain_commit disabled): its notes in outbox.commit_notes (or, SERIALIZABLE,
--                    in its row of outbox.commit_hooks) are deleted.
-- Every fix moves the cache the safe way (a head is made or pointed at the first deliverable row, a
-- floor lowered, a park ended): a claim re-checks every head against the table, so a fix that
-- raced another session is harmless. Heads locked by a claim right now are skipped (their claim
-- refreshes them). Cost: one walk over the distinct keys with unsent rows (a skip scan of the
-- partition index) plus, per key, its poisoned rows in front of its first deliverable one: it grows
-- with partitions, not with rows. One repair per queue at a time (advisory lock (1885823232 +
-- queue_id, -3), tried, never waited for: a second caller returns nothing).
-- Every problem is returned (and, when fixed, raised as a WARNING for the server log and counted in
-- outbox.repairs); an empty result means the cache was right. Unpartitioned queues keep no cache.
CREATE OR REPLACE FUNCTION outbox.repair(queue text, dry_run boolean DEFAULT false)
RETURNS TABLE(partition_key text, cause text, head_id bigint, detail text)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_material = off
SET jit = off
AS $$
DECLARE
  fn constant text := 'repair';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_noted text[] := '{}';
  r record;
BEGIN
  IF dry_run IS NULL THEN
    PERFORM outbox._invalid(fn, 'dry_run must not be NULL');
  END IF;
  IF v_q.partition_column IS NULL
     OR NOT pg_catalog.pg_try_advisory_xact_lock(1885823232 + v_q.queue_id, -3)
     -- Not built yet (after a crash): the next claim rebuilds every head anyway.
     OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id) THEN
    RETURN;
  END IF;

  -- Keys this very transaction wrote whose commit step has not run yet (a requeue_poisoned or a
  -- producer before the repair, in one transaction): that step makes or moves their heads, as a
  -- claim in the same transaction does first (outbox._claim). Not problems.
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
    SELECT COALESCE(pg_catalog.array_agg(u.k), '{}') INTO v_noted
    FROM (SELECT x.k FROM outbox.commit_notes n CROSS JOIN LATERAL pg_catalog.unnest(n.keys) AS x(k)
          WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = v_q.table_oid
          UNION
          SELECT x.k FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids, h.keys) AS x(table_oid, k)
          WHERE h.xid = pg_catalog.pg_current_xact_id() AND x.table_oid = v_q.table_oid) u;
  END IF;

  -- Every per-key lookup is a LATERAL probe of an index (OFFSET 0 keeps it one: the planner must not
  -- turn it into a join). The CTE's row estimate is tiny whatever the queue holds, and given a join
  -- the planner materialized every head of the queue and compared each key with each of them:
  -- 16,666 keys took 20 s, keys squared.
  FOR r IN EXECUTE pg_catalog.format(
    'WITH RECURSIVE keys(k) AS (
       (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL ORDER BY t.%2$I LIMIT 1)
       UNION ALL
       SELECT (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL AND t.%2$I > keys.k ORDER BY t.%2$I LIMIT 1)
       FROM keys WHERE keys.k IS NOT NULL)
     SELECT s.key, s.cause, s.head_id, s.row_id, s.detail FROM (
       SELECT keys.k::text AS key, h.head_id, f.id AS row_id,
              CASE WHEN h.present IS NULL THEN ''missing_head''
                   WHEN h.floor_id > f.id THEN ''floor_above_row''
                   WHEN h.parked_until > f.due + interval ''1 second'' THEN ''parked_past_due'' END AS cause,
              CASE WHEN h.present IS NULL THEN pg_catalog.format(''row %%s has no partition head'', f.id)
                   WHEN h.floor_id > f.id THEN pg_catalog.format(''floor %%s is above row %%s'', h.floor_id, f.id)
                   ELSE pg_catalog.format(''head parked until %%s, row %%s due at %%s'', h.parked_until, f.id, f.due)
              END AS detail
       FROM keys
       CROSS JOIN LATERAL (
         SELECT t.id, GREATEST(t.next_attempt_at, t.leased_until, $3) AS due FROM %1$s t
         WHERE t.%2$I = keys.k AND t.sent_at IS NULL AND t.attempt_count < $2
         ORDER BY t.id LIMIT 1) f
       LEFT JOIN LATERAL (
         SELECT true AS present, x.head_id, x.floor_id, x.parked_until FROM outbox.partition_heads x
         WHERE x.queue_id = $1 AND x.partition_key = keys.k::text
         OFFSET 0) h ON true
       -- A key with a wake note is not stuck: the next claim applies the note (outbox._apply_wakes).
       CROSS JOIN LATERAL (
         SELECT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                        WHERE w.queue_id = $1 AND w.partition_key = keys.k::text) AS noted
         OFFSET 0) n
       WHERE keys.k IS NOT NULL AND NOT n.noted AND keys.k::text <> ALL ($4)) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_now, v_noted
  LOOP
    IF NOT dry_run THEN
      IF r.cause = 'missing_head' THEN
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        VALUES (v_q.queue_id, r.key, r.row_id, r.row_id)
        ON CONFLICT ON CONSTRAINT partition_heads_pkey DO NOTHING;
      ELSE
        UPDATE outbox.partition_heads h
        SET head_id = r.row_id, parked_until = NULL, floor_id = LEAST(h.floor_id, r.row_id)
        WHERE h.ctid = (SELECT x.ctid FROM outbox.partition_heads x
                        WHERE x.queue_id = v_q.queue_id AND x.partition_key = r.key
                        FOR NO KEY UPDATE SKIP LOCKED);
      END IF;
      CONTINUE WHEN NOT FOUND;
      RAISE WARNING 'pgdrain repair: queue %, partition %: % (%)', v_q.queue, r.key, r.cause, r.detail;
      INSERT INTO outbox.repairs AS c (queue, cause, repairs, last_repair_at)
      VALUES (v_q.queue, r.cause, 1, v_now)
      ON CONFLICT ON CONSTRAINT repairs_pkey DO UPDATE SET repairs = c.repairs + 1, last_repair_at = EXCLUDED.last_repair_at;
    END IF;
    partition_key := r.key;
    cause := r.cause;
    head_id := r.head_id;
    detail := r.detail;
    RETURN NEXT;
  END LOOP;
  IF NOT dry_run AND FOUND THEN
    PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  END IF;

  -- Notes of transactions that ended without running their commit step (pgdrain_commit was
  -- disabled): never read again, they would stay forever. The rows they noted were checked above
  -- like any other; the notes are only garbage.
  FOR r IN
    SELECT s.xid, pg_catalog.sum(s.notes) AS notes
    FROM (SELECT n.xid, pg_catalog.count(*) AS notes
          FROM outbox.commit_notes n
          WHERE n.table_oid = v_q.table_oid
            AND pg_catalog.pg_xact_status(n.xid) IS DISTINCT FROM 'in progress'
          GROUP BY n.xid
          UNION ALL
          -- The first statement's notes (a SERIALIZABLE transaction's: all) are in its hook, one entry
          -- per row (outbox._note_written).
          SELECT h.xid, pg_catalog.count(*)
          FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids) AS o(table_oid)
          WHERE o.table_oid = v_q.table_oid
            AND pg_catalog.pg_xact_status(h.xid) IS DISTINCT FROM 'in progress'
          GROUP BY h.xid) s
    GROUP BY s.xid
    ORDER BY s.xid
  LOOP
    detail := pg_catalog.format('%s notes of transaction %s, which ended without its commit step', r.notes, r.xid);
    IF NOT dry_run THEN
      DELETE FROM outbox.commit_notes n WHERE n.xid = r.xid AND n.table_oid = v_q.table_oid;
      DELETE FROM outbox.commit_hooks h WHERE h.xid = r.xid;
      RAISE WARNING 'pgdrain repair: queue %: stale_notes (%)', v_q.queue, detail;
      INSERT INTO outbox.repairs AS c (queue, cause, repairs, last_repair_at)
      VALUES (v_q.queue, 'stale_notes', 1, v_now)
      ON CONFLICT ON CONSTRAINT repairs_pkey DO UPDATE SET repairs = c.repairs + 1, last_repair_at = EXCLUDED.last_repair_at;
    END IF;
    partition_key := NULL;
    cause := 'stale_notes';
    head_id := NULL;
    RETURN NEXT;
  END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether p_text is empty or white space only: ASCII white space, every Unicode space and line or
-- paragraph separator, and the invisible format characters that read as nothing (zero-width
-- spaces and joiners, the word joiner, the byte order mark). Spelled out: [[:space:]] alone
-- follows the database's LC_CTYPE, which is ASCII only under C (how --no-locale clusters run), and
-- an ideographic space passed for a name. NULL for NULL.
CREATE OR REPLACE FUNCTION outbox._is_blank(p_text text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT p_text !~ '[^[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]'
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates an operator's reason for an action on rows: a text of at most 1000 characters that is
-- not only white space (outbox._is_blank: any Unicode space, line break, zero-width space), recorded in
-- the row's last_error and in outbox.operator_actions.
CREATE OR REPLACE FUNCTION outbox._check_reason(p_function text, p_reason text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_reason IS NULL OR outbox._is_blank(p_reason) OR pg_catalog.length(p_reason) > 1000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'reason must be a non-blank text of at most 1000 characters, got %s',
      COALESCE(pg_catalog.quote_literal(pg_catalog.left(p_reason, 50)), 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The insert behind enqueue and enqueue_event (p_function names the caller in errors): validates
-- the event and inserts it, returning its id (provisional until COMMIT on a partitioned queue, see
-- DESIGN "Identity and order of an event") and its event_id. deliver_at delays the first attempt,
-- at most the queue's max_delay (it is the row's next_attempt_at; on a partitioned queue it holds back the key's later events
-- too, which keep their order). headers (an object of strings) travel with the event to the sink.
CREATE OR REPLACE FUNCTION outbox._enqueue(p_function text, p_queue text, p_event_type text, p_payload jsonb,
                                           p_partition_key text, p_deliver_at timestamptz, p_headers jsonb,
                                           p_event_id uuid)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(p_function, p_queue);
  v_key_column text := '';
  v_key_value text := '';
BEGIN
  IF p_event_type IS NULL OR outbox._is_blank(p_event_type) THEN
    PERFORM outbox._invalid(p_function, 'event_type must be a non-empty string');
  END IF;
  IF p_payload IS NULL THEN
    PERFORM outbox._invalid(p_function, 'payload must not be NULL (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF pg_catalog.jsonb_typeof(p_payload) = 'null' THEN
    PERFORM outbox._invalid(p_function, 'payload must not be JSON null (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF p_deliver_at IN ('infinity', '-infinity') THEN
    PERFORM outbox._invalid(p_function, 'deliver_at must be a finite time (NULL: deliver now)');
  END IF;
  PERFORM outbox._check_delay(p_function, 'deliver_at', v_q, ARRAY[p_deliver_at], false);
  IF p_headers IS NOT NULL AND (pg_catalog.jsonb_typeof(p_headers) <> 'object'
                                OR pg_catalog.jsonb_path_exists(p_headers, '$.* ? (@.type() != "string")')) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'headers must be NULL or a JSON object whose values are strings, got %s', pg_catalog.left(p_headers::text, 200)));
  END IF;
  IF v_q.partition_column IS NULL THEN
    IF p_partition_key IS NOT NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be NULL: queue %s has no partition column', v_q.queue));
    END IF;
  ELSE
    IF p_partition_key IS NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must not be NULL: queue %s is partitioned by %s', v_q.queue, v_q.partition_column));
    END IF;
    IF pg_catalog.btrim(p_partition_key) = '' THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be a non-empty string, got %s', pg_catalog.quote_literal(p_partition_key)));
    END IF;
    v_key_column := pg_catalog.format(', %I', v_q.partition_column);
    v_key_value := pg_catalog.format(', $6::%s', v_q.partition_type);
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO %s AS t (event_type, payload, next_attempt_at, headers, event_id%s)
     VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.gen_random_uuid())%s)
     RETURNING t.id, t.event_id',
    v_q.table_oid::regclass, v_key_column, v_key_value)
    USING p_event_type, p_payload, p_deliver_at, p_headers, p_event_id, p_partition_key;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The version of the outbox schema installed in this database: the release it belongs to and the
-- number of the last migration applied (the file migrations/outbox/NNNNN_*.sql). A client that needs
-- a function added by migration N checks migration >= N before it starts (the Go drainer does).
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 40;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migrations 00002 and 00003 carry the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__truncate() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__notify() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_runs(text, integer, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked_runs(text, integer, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.queue_info(text) SECURITY DEFINER;
ALTER FUNCTION outbox.poisoned_rows(text, integer, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_waits(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_woke(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_turn(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.poison_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.retry_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.dismiss_poisoned(text, bigint[], text) SECURITY DEFINER;
ALTER FUNCTION outbox.operator_log(text, integer, bigint) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.claim_runs(text, integer, interval, integer),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.claim_locked_runs(text, integer, integer),
  outbox.settle_locked(text, bigint[], text[], text[], timestamptz[])
  TO pgdrain_worker;

-- Operators: read the state, give poisoned rows a fresh start, purge; list the registered queues.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.requeue_poisoned(text, bigint[]),
  outbox.purge_sent(text, interval, integer)
  TO pgdrain_operator;
GRANT SELECT ON outbox.queues TO pgdrain_operator;

-- Workers and operators: a queue's settings, when its next row is due (the drainer's sleep), and the
-- repair pass over its partition heads (the drainer runs it periodically; pgdrain check dry-runs it).
GRANT EXECUTE ON FUNCTION
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.repair(text, boolean)
  TO pgdrain_worker, pgdrain_operator;

-- Workers say when they wait for a NOTIFY of a queue that notifies 'when_waiting' (outbox.set_notify,
-- which like create_queue is granted to nobody), and take turns to claim while rows trickle in.
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint),
  outbox.claim_turn(text, interval)
  TO pgdrain_worker;

-- Workers also read what the Go drainer reports about its queue: the gauges (WithMetrics), wedged
-- partitions (WithWedgeObserver) and the index check at start. All read-only, no payloads.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text)
  TO pgdrain_worker;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.

-- Readers (the operator console's pages, dashboards): the gauges, wedged partitions, the index
-- check, the registered queues and the poisoned rows, never a payload unless granted on the table.
-- Operators read the same, and may end a stuck lease.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.poisoned_rows(text, integer, bigint)
  TO pgdrain_reader;
GRANT SELECT ON outbox.queues TO pgdrain_reader;
GRANT EXECUTE ON FUNCTION
  outbox.poisoned_rows(text, integer, bigint),
  outbox.release_lease(text, bigint)
  TO pgdrain_operator;

-- Operators act on rows that will not move on their own (00025): skip (poison with a reason), retry
-- now, dismiss poisoned rows; every action is fenced and logged, and the log is read by operators
-- and readers.
GRANT EXECUTE ON FUNCTION
  outbox.poison_row(text, bigint, integer, text),
  outbox.retry_row(text, bigint, integer, text),
  outbox.dismiss_poisoned(text, bigint[], text),
  outbox.operator_log(text, integer, bigint)
  TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION outbox.operator_log(text, integer, bigint) TO pgdrain_reader;

-- Everyone who may use the schema reads its version (outbox.version: a constant, no data): the Go
-- drainer checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION outbox.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Applies the wake notes producers left for a queue (outbox.partition_wakes, see
-- outbox.tg_queue__commit): a committed row of the note's key whose head a claim held at the
-- time. Each noted partition gets what the producer could not write itself: a head if it has
-- none, an empty head pointed at the row and woken, a floor lowered to the row. Notes of a head
-- that is still held stay for a later claim; a bounded number per call, oldest first.
-- Returns the keys it applied, for the caller to refresh.
CREATE OR REPLACE FUNCTION outbox._apply_wakes(p_q outbox.queues)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_notes tid[];
  v_keys text[];
  v_lows bigint[];
  v_done text[];
BEGIN
  SELECT pg_catalog.array_agg(w.ctid) INTO v_notes
  FROM (SELECT x.ctid FROM outbox.partition_wakes x WHERE x.queue_id = p_q.queue_id
        LIMIT 256 FOR UPDATE SKIP LOCKED) w;
  IF v_notes IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT pg_catalog.array_agg(s.k ORDER BY s.k), pg_catalog.array_agg(s.lo ORDER BY s.k)
    INTO v_keys, v_lows
  FROM (SELECT w.partition_key AS k, pg_catalog.min(w.low_id) AS lo FROM outbox.partition_wakes w
        WHERE w.ctid = ANY (v_notes) GROUP BY 1) s;

  -- Heads we can lock now (or that do not exist: made here) take the note; the others wait.
  WITH held AS (
    SELECT h.partition_key FROM outbox.partition_heads h
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
    FOR NO KEY UPDATE SKIP LOCKED),
  fixed AS (
    UPDATE outbox.partition_heads h
    SET head_id = COALESCE(h.head_id, u.lo),
        parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
        floor_id = LEAST(h.floor_id, u.lo)
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k AND u.k IN (SELECT held.partition_key FROM held)
    RETURNING h.partition_key),
  made AS (
    INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
    -- Floor 0: notes of the key beyond this call's may hold smaller ids.
    SELECT p_q.queue_id, u.k, u.lo, 0
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                      WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
    ORDER BY u.k
    ON CONFLICT (queue_id, partition_key) DO NOTHING
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(k) INTO v_done
  FROM (SELECT fixed.partition_key AS k FROM fixed UNION ALL SELECT made.partition_key FROM made) d;

  DELETE FROM outbox.partition_wakes w
  WHERE w.ctid = ANY (v_notes) AND w.partition_key = ANY (v_done);
  RETURN v_done;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Points the head of each given partition at its first deliverable row (the smallest id at or above
-- the partition's floor among unsent, not poisoned rows), parked until that row's lease or backoff
-- ends; creates missing heads. The caller must have written its own changes in an earlier
-- statement, so they are visible here.
-- A partition found empty loses its head, and a partition whose head search stepped over poisoned
-- rows gets its floor raised past them, but only with the head locked FOR UPDATE (skip, never
-- wait) and after a second look with a newer snapshot: a producer committing rows of the
-- partition holds its head FOR KEY SHARE until it commits (outbox.tg_queue__commit), so its
-- rows never lose their head; one that finds the head locked by us leaves a wake note, applied by
-- a later claim. When the head is busy an empty head (head_id NULL) is parked for a second and
-- looked at again by a later claim.
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
  v_next constant text := pg_catalog.format(
    'SELECT k.key, n.id, n.attempt_count, fl.floor_id, fl.has_head, fh.xmin AS seen,
            NULLIF(GREATEST(n.next_attempt_at, n.leased_until, $4), $4) AS parked,
            n.id IS NULL OR f.attempt_count >= $2 AS tidy
     FROM pg_catalog.unnest($1::text[]) AS k(key)
     -- A join, read once per key: as a scalar subquery in a pulled-up LATERAL the planner copied
     -- the lookup into each of its five uses (15 of 24 buffers per key in a drain).
     LEFT JOIN outbox.partition_heads fh ON fh.queue_id = $3 AND fh.partition_key = k.key
     CROSS JOIN LATERAL (
       SELECT COALESCE(fh.floor_id, 0) AS floor_id, fh.partition_key IS NOT NULL AS has_head) fl
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
              CASE WHEN f.attempt_count < $2 THEN f.leased_until ELSE p.leased_until END AS leased_until) n',
    p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type);
  v_tidy text[];
  v_tidy_pass text[];
  v_keys text[] := p_keys;
  v_stale text[];
  v_locked text[];
  v_busy text[];
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
           AND h.queue_id = $3 AND h.partition_key = next.key AND h.xmin = next.seen
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
                  AND next.key NOT IN (SELECT made.partition_key FROM made))
       FROM next', v_next),
      'text[], integer, integer, timestamptz, boolean', 'TABLE(pgdrain_tidy text[], pgdrain_stale text[])')
      INTO v_tidy_pass, v_stale USING v_keys, p_q.max_attempts, p_q.queue_id, v_now, v_read_committed;
    v_tidy := v_tidy || v_tidy_pass;
    EXIT WHEN v_stale IS NULL OR NOT v_read_committed;
    v_keys := v_stale;
  END LOOP;
  IF v_tidy IS NULL THEN
    RETURN;
  END IF;

  IF v_read_committed THEN
    -- A partition with no head row has nothing a producer relies on (one that makes its head
    -- meanwhile waits for our insert, then leaves a wake note): it counts as locked.
    SELECT pg_catalog.array_agg(k) INTO v_locked
    FROM pg_catalog.unnest(v_tidy) AS k
    WHERE k IN (SELECT h.partition_key FROM outbox.partition_heads h
                WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_tidy)
                FOR UPDATE SKIP LOCKED)
       OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads h
                      WHERE h.queue_id = p_q.queue_id AND h.partition_key = k);
  END IF;
  SELECT pg_catalog.array_agg(k) INTO v_busy
  FROM pg_catalog.unnest(v_tidy) AS k
  WHERE k <> ALL (COALESCE(v_locked, '{}'));

  -- Head busy (a producer is committing rows of the partition, or another claim holds it): point
  -- the head at what we found, the floor stays; an empty head is parked for a second and looked at
  -- again by a later claim.
  IF v_busy IS NOT NULL THEN
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH next AS (%s)
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, COALESCE(next.attempt_count, 0),
              CASE WHEN next.id IS NULL THEN $4 + interval ''1 second'' ELSE next.parked END
       FROM next WHERE next.id IS NOT NULL OR next.has_head
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until', v_next),
      'text[], integer, integer, timestamptz', 'void')
      USING v_busy, p_q.max_attempts, p_q.queue_id, v_now;
  END IF;
  IF v_locked IS NULL THEN
    RETURN;
  END IF;

  -- Under the exclusive lock, with a newer snapshot (rows committed before the lock are visible):
  -- delete empty heads, raise floors past poisoned rows.
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH next AS (%s),
     gone AS (
       DELETE FROM outbox.partition_heads h USING next
       WHERE next.id IS NULL AND h.queue_id = $3 AND h.partition_key = next.key)
     INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
     SELECT $3, next.key, next.id, next.attempt_count, next.parked, next.id
     FROM next WHERE next.id IS NOT NULL
     ON CONFLICT (queue_id, partition_key) DO UPDATE
       SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
           parked_until = EXCLUDED.parked_until, floor_id = EXCLUDED.floor_id', v_next),
    'text[], integer, integer, timestamptz', 'void')
    USING v_locked, p_q.max_attempts, p_q.queue_id, v_now;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records outcomes for rows, the common core of apply_result(s) (p_tokens given: only rows whose
-- lease_token still matches) and settle_locked (p_tokens NULL: the caller checked it holds the
-- row locks). A row that does not qualify is not touched at all. Every outcome clears lease and
-- token together. 'transient' adds an attempt with backoff; on a partitioned queue it is capped
-- at max_attempts - 1 so a partition head is never poisoned by a transient failure. 'permanent'
-- poisons (attempt_count = max_attempts) unless the queue's policy is 'retry'.
-- A backoff is counted from the clock when the outcome is recorded, not from now() (the
-- transaction start): in lock mode the claiming transaction has been open for the whole delivery,
-- and a backoff counted from its start could be over before it is written. sent_at is a record,
-- not a deadline: it stays now(), the time of the transaction that made the row sent. A sent row's
-- last_error is cleared (its attempt_count still says how many attempts failed before): a delivered
-- row showing an old error read as a failure (issue 32).
-- An error is kept to its first 4000 characters (the Go drainer sends at most 4000 bytes; other
-- clients sent whole error pages, megabytes read back by every stats and console call).
-- p_retry_at (NULL, or aligned with p_ids; NULL elements = backoff) sets a transient row's next
-- attempt to a time the caller chose (a peer's Retry-After), never earlier than the clock.
-- A run (several rows of a key in one call, lease mode) is recorded up to its first row that is
-- refused while still deliverable (its token is another worker's now: the lease ran out and the row
-- was claimed again, or an operator released it): the key's later rows are refused too. Recorded,
-- they were sent while a row before them was still to be delivered, which would then come after
-- them. On a partitioned queue a lease-mode call first locks the rows that are still the caller's,
-- in id order, and reads them at their latest version (still_ours, a CTE of its own: a condition
-- outside a locking subquery is pushed below the lock and tested on the snapshot's version), then
-- updates only those; the others still deliverable (refused: read only for the rows still_ours
-- left out, usually none) hold back their key's later rows. So a claim of a run's row that
-- commits while the call waits for it refuses the rows after it, though the statement's snapshot
-- never saw it; and every row lock the call
-- waits for is taken in id order, before any update: two calls holding tokens of the same rows (a
-- stale worker's and the one that claimed them again) cannot deadlock, whatever else holds their
-- rows (a lock-mode batch, an operator). A row that changed in any other way since the snapshot
-- (sent or poisoned by someone else meanwhile) refuses the rows after it too: they are delivered
-- again, never out of order.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[], p_retry_at timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_done bigint[];
  v_keys text[];
  v_cap integer := CASE WHEN p_q.partition_column IS NULL THEN p_q.max_attempts ELSE p_q.max_attempts - 1 END;
  v_clock timestamptz := pg_catalog.clock_timestamp();
BEGIN
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH input AS (
       SELECT u.id, u.token, u.outcome, u.err, u.retry_at
       FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $11::timestamptz[])
         AS u(id, token, outcome, err, retry_at)),%4$s
     upd AS (
       -- The attempts a failure leaves are computed from the row being updated, not read in a join
       -- before it: one index probe per row instead of two.
       UPDATE %1$s t SET
         sent_at = CASE WHEN i.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = CASE WHEN i.outcome = ''sent'' THEN t.attempt_count ELSE %3$s END,
         next_attempt_at = CASE
           WHEN i.outcome = ''sent'' THEN t.next_attempt_at
           WHEN %3$s >= $6 THEN NULL
           WHEN i.retry_at IS NOT NULL THEN GREATEST(i.retry_at, $10)
           ELSE $10 + outbox._backoff(%3$s, $8, $9) END,
         last_error = CASE WHEN i.outcome = ''sent'' THEN NULL ELSE pg_catalog.left(i.err, 4000) END,
         leased_until = NULL,
         lease_token = NULL
       FROM input i
       WHERE t.id = i.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = i.token)%5$s
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END,
    -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts while it was
    -- leased stays poisoned.
    '(CASE WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
           ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END)',
    CASE WHEN p_q.partition_column IS NOT NULL THEN pg_catalog.format('
     still_ours AS MATERIALIZED (
       SELECT r.id FROM input j JOIN %1$s r ON r.id = j.id
       WHERE $2 IS NOT NULL AND r.sent_at IS NULL AND r.lease_token = j.token
       ORDER BY r.id
       FOR NO KEY UPDATE OF r),
     refused AS MATERIALIZED (
       SELECT r.%2$I::text AS key, r.id FROM input j JOIN %1$s r ON r.id = j.id
       WHERE $2 IS NOT NULL AND j.id NOT IN (SELECT o.id FROM still_ours o)
         AND r.sent_at IS NULL AND r.attempt_count < $6),',
      p_q.table_oid::regclass, p_q.partition_column) ELSE '' END,
    CASE WHEN p_q.partition_column IS NOT NULL THEN pg_catalog.format('
         AND ($2 IS NULL OR t.id IN (SELECT o.id FROM still_ours o))
         AND NOT EXISTS (SELECT 1 FROM refused f WHERE f.key = t.%I::text AND f.id < t.id)', p_q.partition_column)
         ELSE '' END),
    'bigint[], uuid[], text[], text[], text, integer, integer, interval, interval, timestamptz, timestamptz[]',
    'TABLE(pgdrain_ids bigint[], pgdrain_keys text[])')
    INTO v_done, v_keys
    USING p_ids, p_tokens, p_outcomes, p_errors, p_q.permanent_policy, p_q.max_attempts, v_cap,
          p_q.backoff_min, p_q.backoff_max, v_clock, p_retry_at;

  IF p_q.partition_column IS NOT NULL AND v_keys IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  RETURN COALESCE(v_done, '{}');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The common core of the operators' row actions (poison_row, retry_row, dismiss_poisoned): one
-- statement that takes the rows still in the state the operator saw, changes them, and logs each
-- in outbox.operator_actions (with the session's login role, the reason and the attempt count it had); then the partitions'
-- heads follow (outbox._refresh_heads) and an idle drainer is woken when a row became claimable.
-- Fenced: a row that moved on (sent, requeued to a new id, another attempt recorded, poisoned or
-- not as the action needs) is not taken, nor one a worker delivers right now (a live lease, or a
-- lock-mode claim's row lock: SKIP LOCKED, never waiting). An expired lease's token is cleared with
-- the change, so that worker's late result is refused like any other after its lease ran out.
--   poison   pending, attempt_count = p_attempt_count: poisoned (attempt_count = max_attempts), its
--            key's later rows go past it; requeue_poisoned delivers it later, at the tail of its key.
--   retry    pending and backing off, attempt_count = p_attempt_count: due now.
--   dismiss  poisoned: never delivered, kept as history (sent_at is set, so nothing counts it as
--            pending or poisoned; purge_sent removes it with the sent rows), last_error says so.
-- poison and dismiss put their note in front of the row's last error, kept to 4000 characters in
-- all (as outbox._record keeps an error): a row poisoned, requeued and poisoned again many times
-- does not carry every earlier note.
-- Returns the ids changed.
CREATE OR REPLACE FUNCTION outbox._operator_act(p_q outbox.queues, p_action text, p_ids bigint[],
                                                p_attempt_count integer, p_reason text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
-- (enable_seqscan = off makes a plan that cannot avoid a scan cost about 1e10, past the JIT
-- thresholds: it was compiled on every call, 0.15-1.6 s.)
SET jit = off
AS $$
DECLARE
  v_note constant text := pg_catalog.format('%s by %s: %s',
    CASE p_action WHEN 'poison' THEN 'poisoned' WHEN 'dismiss' THEN 'dismissed' ELSE 'retried' END,
    session_user, p_reason);
  v_ids bigint[];
  v_keys text[];
BEGIN
  EXECUTE pg_catalog.format(
    'WITH r AS (
       SELECT t.id, t.attempt_count FROM %1$s t
       WHERE t.id = ANY ($1) AND t.sent_at IS NULL AND %4$s
         AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.clock_timestamp())
       FOR UPDATE OF t SKIP LOCKED),
     u AS (
       UPDATE %1$s t SET %5$s, leased_until = NULL, lease_token = NULL
       FROM r WHERE t.id = r.id
       RETURNING t.id, %2$s AS event_id, %3$s AS key, r.attempt_count),
     logged AS (
       INSERT INTO outbox.operator_actions (queue, action, row_id, event_id, partition_key, attempt_count, reason)
       SELECT $5, $6, u.id, u.event_id, u.key, u.attempt_count, $7 FROM u
       RETURNING row_id, partition_key)
     SELECT pg_catalog.array_agg(l.row_id ORDER BY l.row_id), pg_catalog.array_agg(DISTINCT l.partition_key)
     FROM logged l',
    p_q.table_oid,
    outbox._event_id_of(p_q),
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END,
    CASE p_action
      WHEN 'poison' THEN 't.attempt_count = $2 AND t.attempt_count < $3'
      WHEN 'retry' THEN 't.attempt_count = $2 AND t.attempt_count < $3 AND t.next_attempt_at > pg_catalog.clock_timestamp()'
      ELSE 't.attempt_count >= $3' END,
    CASE p_action
      WHEN 'poison' THEN 'attempt_count = $3, next_attempt_at = NULL, last_error = pg_catalog.left($4 || COALESCE('' (last error: '' || t.last_error || '')'', ''''), 4000)'
      WHEN 'retry' THEN 'next_attempt_at = NULL'
      ELSE 'sent_at = pg_catalog.now(), next_attempt_at = NULL, last_error = pg_catalog.left($4 || COALESCE('' (last error: '' || t.last_error || '')'', ''''), 4000)' END)
    INTO v_ids, v_keys
    USING p_ids, p_attempt_count, p_q.max_attempts, v_note, p_q.queue, p_action, p_reason;
  IF v_ids IS NULL THEN
    RETURN '{}';
  END IF;
  RAISE LOG 'pgdrain: % % row(s) % of queue %: %', session_user,
    CASE p_action WHEN 'poison' THEN 'poisoned' WHEN 'dismiss' THEN 'dismissed' ELSE 'retried' END,
    v_ids, p_q.queue, COALESCE(p_reason, '(no reason given)');
  IF p_q.partition_column IS NOT NULL AND p_action <> 'dismiss' THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  IF p_action = 'retry' OR p_q.partition_column IS NOT NULL AND p_action = 'poison' THEN
    -- Claimable now: the row itself, or the row behind a skipped head.
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the TRUNCATE
-- trigger and either the NOTIFY trigger (unpartitioned) or the trigger that feeds the commit step
-- (partitioned, whose commit step notifies); then registers the queue. Idempotent: calling it
-- again with new settings updates them; the partition column can not change. An adopted table keeps its rows; missing lease columns are added as
-- NULL = "free". What the table enforces on producers (CHECKs, column privileges) is
-- outbox._guard_queue_table.
-- Registration follows the table: when the registered table was dropped (or dropped and made
-- again) outside drop_queue, the new table is registered under the same queue_id and every piece
-- of state derived from the old one (partition heads, built-mark, clocks) is dropped first; heads
-- are then rebuilt from the new table's rows.
-- A partitioned queue needs the sequence its ids come from (outbox.queues.id_sequence): the commit
-- step renumbers late rows with it.
-- max_delay bounds every caller-chosen next attempt (enqueue's deliver_at, a worker's retry_at, a
-- plain INSERT of next_attempt_at: outbox._check_delay and the table's CHECK made by
-- outbox._guard_next_attempt_at), so nobody can park a key for ever.
-- A created table gets fillfactor 50, so writing a lease is a HOT update (no index touched): a row
-- is written twice, leased and then sent, and the sent version (which leaves the partial indexes)
-- also takes room on the page; at 80, 10-23% of the updates of a drain were HOT (of 50% possible),
-- at 50 47-48%, with a fifth less WAL and a table no larger after its drain. And autovacuum
-- settings for a table that is mostly empty and churns.
CREATE OR REPLACE FUNCTION outbox.create_queue(
  queue text,
  partition_column text DEFAULT NULL,
  max_attempts integer DEFAULT 10,
  backoff_min interval DEFAULT '1 second',
  backoff_max interval DEFAULT '30 seconds',
  permanent_policy text DEFAULT 'poison',
  channel text DEFAULT NULL,
  max_delay interval DEFAULT '7 days')
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'create_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_schema text := pg_catalog.split_part(v_name, '.', 1);
  v_table text := pg_catalog.split_part(v_name, '.', 2);
  v_col text := pg_catalog.lower(partition_column);
  -- The default channel names the table; one too long for a channel (63 characters) keeps its
  -- first 54 and a hash of the whole name.
  v_channel text := COALESCE(channel, CASE
    WHEN pg_catalog.length('pgdrain_' || v_schema || '_' || v_table) <= 63 THEN 'pgdrain_' || v_schema || '_' || v_table
    ELSE pg_catalog.left('pgdrain_' || v_schema || '_' || v_table, 54) || '_' || pg_catalog.left(pg_catalog.md5(v_name), 8) END);
  -- Index names: the table's, or for a table name over 40 characters its first 31 and a hash
  -- (two long names alike in their first 40 made one index name: 42P07 for the second queue).
  v_index_base text := CASE WHEN pg_catalog.length(v_table) <= 40 THEN v_table
    ELSE pg_catalog.left(v_table, 31) || '_' || pg_catalog.left(pg_catalog.md5(v_table), 8) END;
  v_rel regclass;
  v_old outbox.queues;
  v_type text;
  v_queue_id integer;
  v_missing text;
  v_has_nulls boolean;
  v_sequence regclass;
  v_other text;
  v_new_table boolean;
  v_created boolean := false;
BEGIN
  IF partition_column IS NOT NULL AND partition_column !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must be a plain column name, got %L', partition_column));
  END IF;
  IF v_col IN ('id', 'event_type', 'payload', 'created_at', 'attempt_count', 'next_attempt_at',
               'sent_at', 'leased_until', 'lease_token', 'last_error', 'event_id', 'headers') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF v_col IN ('tableoid', 'xmin', 'cmin', 'xmax', 'cmax', 'ctid') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be a system column, got %L', partition_column));
  END IF;
  IF v_schema IN ('outbox', 'alr', 'core') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of pgdrain''s own schema %s, got %s', v_schema, v_name));
  END IF;
  IF v_schema = 'information_schema' OR v_schema LIKE 'pg\_%' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of the system schema %s, got %s', v_schema, v_name));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  PERFORM outbox._check_span(fn, 'backoff_min', backoff_min);
  PERFORM outbox._check_span(fn, 'backoff_max', backoff_max);
  PERFORM outbox._check_span(fn, 'max_delay', max_delay);
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_min > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('backoff_min must be at most 1 day, got %s', backoff_min));
  END IF;
  IF backoff_max IS NULL OR backoff_max < backoff_min OR backoff_max > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_max must be between backoff_min (%s) and 1 day, got %s',
      backoff_min, COALESCE(backoff_max::text, 'NULL')));
  END IF;
  IF max_delay IS NULL OR max_delay < backoff_max OR max_delay > interval '3650 days' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_delay must be between backoff_max (%s) and 3650 days, got %s',
      backoff_max, COALESCE(max_delay::text, 'NULL')));
  END IF;
  IF permanent_policy IS NULL OR permanent_policy NOT IN ('poison', 'retry') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'permanent_policy must be ''poison'' or ''retry'', got %L', permanent_policy));
  END IF;
  IF permanent_policy = 'retry' AND v_col IS NOT NULL THEN
    PERFORM outbox._invalid(fn,
      'permanent_policy ''retry'' is not allowed with a partition_column: an event that can never '
      'apply would wedge its partition forever');
  END IF;
  IF v_channel !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'channel must be a plain name of at most 63 characters, got %L', v_channel));
  END IF;
  v_channel := pg_catalog.lower(v_channel);

  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = v_schema) THEN
    RAISE EXCEPTION '%: schema % does not exist', fn, v_schema USING ERRCODE = '3F000';
  END IF;
  v_rel := pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, v_table));

  -- The registration is this table's only while its oid is the table's; a registration whose
  -- table was dropped (and maybe made again) is stale, and the new table is a new queue.
  SELECT * INTO v_old FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF FOUND AND v_old.table_oid = v_rel AND v_old.partition_column IS DISTINCT FROM v_col THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column of registered queue %s is %s and can not change to %s (drop_queue first)',
      v_name, COALESCE(v_old.partition_column, 'NULL'), COALESCE(v_col, 'NULL')));
  END IF;
  -- The registered table renamed away, another made under the queue's name: its producers write
  -- rows the queue never reads, and the old table still holds the queue's. Refused before anything
  -- changes (its heads trigger kept the old one's function: "cannot drop function").
  IF v_old.queue_id IS NOT NULL AND v_old.table_oid IS DISTINCT FROM v_rel
     AND pg_catalog.pg_table_is_visible(v_old.table_oid) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is registered for table %s, which still exists (renamed?): rename it back to %s, or drop_queue(%L) first',
      v_name, v_old.table_oid::regclass, v_name, v_name));
  END IF;
  IF v_rel IS NOT NULL THEN
    SELECT q.queue INTO v_other FROM outbox.queues q WHERE q.table_oid = v_rel AND q.queue <> v_name;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'table %s is already registered as queue %s (renamed?); drop_queue(%L) first', v_name, v_other, v_other));
    END IF;
  END IF;
  v_new_table := v_old.queue_id IS NULL OR v_old.table_oid IS DISTINCT FROM v_rel;

  IF v_rel IS NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TABLE %I.%I (
         id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
         event_type text NOT NULL,
         payload jsonb NOT NULL,
         created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
         attempt_count integer NOT NULL DEFAULT 0,
         next_attempt_at timestamptz,
         sent_at timestamptz,
         leased_until timestamptz,
         lease_token uuid,
         last_error text,
         event_id uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
         headers jsonb%s
       ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
               autovacuum_vacuum_insert_scale_factor = 0.01)',
      v_schema, v_table,
      CASE WHEN v_col IS NULL THEN '' ELSE pg_catalog.format(', %I text NOT NULL', v_col) END);
    v_rel := pg_catalog.format('%I.%I', v_schema, v_table)::regclass;
    v_created := true;
  ELSE
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = v_rel) NOT IN ('r', 'p') THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but is not a table', v_name));
    END IF;
    -- A partition is delivered through its partitioned table, and an inheritance parent's
    -- statements read its children's rows too: claims would hand them out while their own heads,
    -- triggers and indexes are not pgdrain's.
    IF (SELECT c.relispartition FROM pg_catalog.pg_class c WHERE c.oid = v_rel) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s is a partition of %s: register the partitioned table instead', v_name,
        (SELECT i.inhparent::regclass FROM pg_catalog.pg_inherits i WHERE i.inhrelid = v_rel)));
    END IF;
    SELECT pg_catalog.string_agg(i.inhrelid::regclass::text, ', ' ORDER BY i.inhrelid) INTO v_other
    FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = v_rel AND NOT c.relispartition;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s must not have inheritance children (their rows would be claimed through it), got %s', v_name, v_other));
    END IF;
    -- Adopt: the columns the application already writes must be there with the right types.
    SELECT pg_catalog.string_agg(pg_catalog.format('%s %s', r.col, r.typ), ', ') INTO v_missing
    FROM (VALUES ('id', 'bigint'), ('event_type', 'text'), ('payload', 'jsonb'),
                 ('created_at', 'timestamp with time zone')) AS r(col, typ)
    WHERE NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = v_rel AND a.attname = r.col AND NOT a.attisdropped
        AND pg_catalog.format_type(a.atttypid, a.atttypmod) = r.typ);
    IF v_missing IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s exists but lacks required columns (or has other types): %s', v_name, v_missing));
    END IF;
    IF NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_index i
      WHERE i.indrelid = v_rel AND i.indisprimary AND i.indnatts = 1
        AND i.indkey[0] = (SELECT a.attnum FROM pg_catalog.pg_attribute a
                           WHERE a.attrelid = v_rel AND a.attname = 'id')) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but id is not its primary key', v_name));
    END IF;
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row. Only
    -- when one is missing: ALTER TABLE locks the table even when it adds nothing, and create_queue
    -- run again on a registered queue (deploy scripts do) would hold up its producers and claims.
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = v_rel AND NOT a.attisdropped
          AND a.attname IN ('attempt_count', 'next_attempt_at', 'sent_at', 'leased_until', 'lease_token',
                            'last_error', 'headers')) < 7 THEN
      EXECUTE pg_catalog.format(
        'ALTER TABLE %s
           ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
           ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
           ADD COLUMN IF NOT EXISTS sent_at timestamptz,
           ADD COLUMN IF NOT EXISTS leased_until timestamptz,
           ADD COLUMN IF NOT EXISTS lease_token uuid,
           ADD COLUMN IF NOT EXISTS last_error text,
           ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    END IF;
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order. A column
      -- already NOT NULL (a registered queue's) is neither read nor altered.
      IF NOT (SELECT a.attnotnull FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col) THEN
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
          INTO STRICT v_has_nulls;
        IF v_has_nulls THEN
          PERFORM outbox._invalid(fn, pg_catalog.format(
            'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
        END IF;
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
      END IF;
    END IF;
  END IF;

  IF v_col IS NOT NULL THEN
    SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO v_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col;
  END IF;

  -- Renumbering late rows at commit (per-key commit order) takes new ids from this sequence.
  v_sequence := outbox._id_sequence(v_rel);
  IF v_col IS NOT NULL AND v_sequence IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is partitioned, so its id must come from an ascending sequence (identity, serial or '
      'DEFAULT nextval(''a_sequence'')): per-key commit order renumbers late rows with it', v_name));
  END IF;

  -- Everything derived from the old table goes before the new one is registered.
  IF v_old.queue_id IS NOT NULL AND v_new_table THEN
    DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_old.queue_id;
  END IF;

  -- A larger max_attempts does not make poisoned rows deliverable again: on a partitioned queue they
  -- would come back in front of what followed them in their keys (a 'register' after the
  -- 'unregister' delivered past it). They stay poisoned, at the new limit, until requeue_poisoned
  -- moves them to the tail of their keys. Read through the claim index (attempt_count, id).
  IF NOT v_new_table AND create_queue.max_attempts > v_old.max_attempts THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = $1, next_attempt_at = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $2 AND t.attempt_count < $1', v_rel)
      USING create_queue.max_attempts, v_old.max_attempts;
  END IF;

  -- clock_base: every id the sequence gave out so far counts as committed for per-key commit order
  -- (sessions with a cached sequence may still hand out smaller ones; their rows are then late).
  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base, max_delay)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0), create_queue.max_delay)
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence, max_delay = EXCLUDED.max_delay,
        clock_base = CASE WHEN q.table_oid = EXCLUDED.table_oid THEN q.clock_base ELSE EXCLUDED.clock_base END
  RETURNING q.queue_id INTO v_queue_id;

  -- The two required indexes, unless an equivalent one (any name) is already there.
  IF v_col IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'partition') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (%I, id) WHERE sent_at IS NULL',
                              v_index_base || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              v_index_base || '_pgdrain_claim', v_rel);
  END IF;

  -- CHECKs, the producers' column privileges (plain INSERT of an event, RETURNING id; the heads
  -- trigger runs as owner) and the TRUNCATE trigger.
  PERFORM outbox._guard_queue_table(v_rel, v_col, NOT v_created);
  PERFORM outbox._guard_next_attempt_at(v_rel, create_queue.max_delay,
                                        v_new_table OR v_old.max_delay IS DISTINCT FROM create_queue.max_delay, v_created);

  -- The NOTIFY trigger wakes drainers of an unpartitioned queue; a partitioned queue's rows become
  -- claimable at commit, where its commit step notifies (outbox._commit_keys). Both as
  -- outbox.set_notify last said (a registration keeps it).
  PERFORM outbox._install_notify_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
  -- An unpartitioned queue has no heads triggers (nor its function); a partitioned one's are
  -- replaced in place (outbox._install_heads_trigger). Dropped only when there: DROP TRIGGER locks
  -- the table even when there is nothing to drop.
  IF v_col IS NULL THEN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = v_rel AND t.tgname IN ('pgdrain_heads', 'pgdrain_snapshot')) THEN
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    END IF;
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  END IF;
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    IF v_new_table THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Finds the pending deliverable rows of a partitioned queue that no claim can reach, and (unless
-- dry_run) makes them reachable again. Partition heads, floors and parks are a cache of the queue
-- table (outbox.partition_heads); this checks the cache against the table, one key at a time:
--   missing_head     the key has a deliverable row but no head: no claim would ever look at it;
--   floor_above_row  the head's floor (below it, everything is taken to be sent or poisoned) is above
--                    the key's first deliverable row: that row would never be found;
--   parked_past_due  the head is parked (lease or backoff) more than a second past the time its first
--                    deliverable row is due;
--   stale_notes      (no key) a transaction that wrote the queue ended without its commit step
--                    (pgdrain_commit disabled): its notes in outbox.commit_notes (or, SERIALIZABLE,
--                    in its row of outbox.commit_hooks) are deleted.
-- Every fix moves the cache the safe way (a head is made or pointed at the first deliverable row, a
-- floor lowered, a park ended): a claim re-checks every head against the table, so a fix that
-- raced another session is harmless. Heads locked by a claim right now are skipped (their claim
-- refreshes them). Cost: one walk over the distinct keys with unsent rows (a skip scan of the
-- partition index) plus, per key, its poisoned rows in front of its first deliverable one: it grows
-- with partitions, not with rows. One repair per queue at a time (advisory lock (1885823232 +
-- queue_id, -3), tried, never waited for: a second caller returns nothing).
-- Every problem is returned (and, when fixed, raised as a WARNING for the server log and counted in
-- outbox.repairs); an empty result means the cache was right. Unpartitioned queues keep no cache.
CREATE OR REPLACE FUNCTION outbox.repair(queue text, dry_run boolean DEFAULT false)
RETURNS TABLE(partition_key text, cause text, head_id bigint, detail text)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_material = off
SET jit = off
AS $$
DECLARE
  fn constant text := 'repair';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_now timestamptz := pg_catalog.clock_timestamp();
  r record;
BEGIN
  IF dry_run IS NULL THEN
    PERFORM outbox._invalid(fn, 'dry_run must not be NULL');
  END IF;
  IF v_q.partition_column IS NULL
     OR NOT pg_catalog.pg_try_advisory_xact_lock(1885823232 + v_q.queue_id, -3)
     -- Not built yet (after a crash): the next claim rebuilds every head anyway.
     OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id) THEN
    RETURN;
  END IF;

  -- Every per-key lookup is a LATERAL probe of an index (OFFSET 0 keeps it one: the planner must not
  -- turn it into a join). The CTE's row estimate is tiny whatever the queue holds, and given a join
  -- the planner materialized every head of the queue and compared each key with each of them:
  -- 16,666 keys took 20 s, keys squared.
  FOR r IN EXECUTE pg_catalog.format(
    'WITH RECURSIVE keys(k) AS (
       (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL ORDER BY t.%2$I LIMIT 1)
       UNION ALL
       SELECT (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL AND t.%2$I > keys.k ORDER BY t.%2$I LIMIT 1)
       FROM keys WHERE keys.k IS NOT NULL)
     SELECT s.key, s.cause, s.head_id, s.row_id, s.detail FROM (
       SELECT keys.k::text AS key, h.head_id, f.id AS row_id,
              CASE WHEN h.present IS NULL THEN ''missing_head''
                   WHEN h.floor_id > f.id THEN ''floor_above_row''
                   WHEN h.parked_until > f.due + interval ''1 second'' THEN ''parked_past_due'' END AS cause,
              CASE WHEN h.present IS NULL THEN pg_catalog.format(''row %%s has no partition head'', f.id)
                   WHEN h.floor_id > f.id THEN pg_catalog.format(''floor %%s is above row %%s'', h.floor_id, f.id)
                   ELSE pg_catalog.format(''head parked until %%s, row %%s due at %%s'', h.parked_until, f.id, f.due)
              END AS detail
       FROM keys
       CROSS JOIN LATERAL (
         SELECT t.id, GREATEST(t.next_attempt_at, t.leased_until, $3) AS due FROM %1$s t
         WHERE t.%2$I = keys.k AND t.sent_at IS NULL AND t.attempt_count < $2
         ORDER BY t.id LIMIT 1) f
       LEFT JOIN LATERAL (
         SELECT true AS present, x.head_id, x.floor_id, x.parked_until FROM outbox.partition_heads x
         WHERE x.queue_id = $1 AND x.partition_key = keys.k::text
         OFFSET 0) h ON true
       -- A key with a wake note is not stuck: the next claim applies the note (outbox._apply_wakes).
       CROSS JOIN LATERAL (
         SELECT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                        WHERE w.queue_id = $1 AND w.partition_key = keys.k::text) AS noted
         OFFSET 0) n
       WHERE keys.k IS NOT NULL AND NOT n.noted) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_now
  LOOP
    IF NOT dry_run THEN
      IF r.cause = 'missing_head' THEN
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        VALUES (v_q.queue_id, r.key, r.row_id, r.row_id)
        ON CONFLICT ON CONSTRAINT partition_heads_pkey DO NOTHING;
      ELSE
        UPDATE outbox.partition_heads h
        SET head_id = r.row_id, parked_until = NULL, floor_id = LEAST(h.floor_id, r.row_id)
        WHERE h.ctid = (SELECT x.ctid FROM outbox.partition_heads x
                        WHERE x.queue_id = v_q.queue_id AND x.partition_key = r.key
                        FOR NO KEY UPDATE SKIP LOCKED);
      END IF;
      CONTINUE WHEN NOT FOUND;
      RAISE WARNING 'pgdrain repair: queue %, partition %: % (%)', v_q.queue, r.key, r.cause, r.detail;
      INSERT INTO outbox.repairs AS c (queue, cause, repairs, last_repair_at)
      VALUES (v_q.queue, r.cause, 1, v_now)
      ON CONFLICT ON CONSTRAINT repairs_pkey DO UPDATE SET repairs = c.repairs + 1, last_repair_at = EXCLUDED.last_repair_at;
    END IF;
    partition_key := r.key;
    cause := r.cause;
    head_id := r.head_id;
    detail := r.detail;
    RETURN NEXT;
  END LOOP;
  IF NOT dry_run AND FOUND THEN
    PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  END IF;

  -- Notes of transactions that ended without running their commit step (pgdrain_commit was
  -- disabled): never read again, they would stay forever. The rows they noted were checked above
  -- like any other; the notes are only garbage.
  FOR r IN
    SELECT s.xid, pg_catalog.sum(s.notes) AS notes
    FROM (SELECT n.xid, pg_catalog.count(*) AS notes
          FROM outbox.commit_notes n
          WHERE n.table_oid = v_q.table_oid
            AND pg_catalog.pg_xact_status(n.xid) IS DISTINCT FROM 'in progress'
          GROUP BY n.xid
          UNION ALL
          -- The first statement's notes (a SERIALIZABLE transaction's: all) are in its hook, one entry
          -- per row (outbox._note_written).
          SELECT h.xid, pg_catalog.count(*)
          FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids) AS o(table_oid)
          WHERE o.table_oid = v_q.table_oid
            AND pg_catalog.pg_xact_status(h.xid) IS DISTINCT FROM 'in progress'
          GROUP BY h.xid) s
    GROUP BY s.xid
    ORDER BY s.xid
  LOOP
    detail := pg_catalog.format('%s notes of transaction %s, which ended without its commit step', r.notes, r.xid);
    IF NOT dry_run THEN
      DELETE FROM outbox.commit_notes n WHERE n.xid = r.xid AND n.table_oid = v_q.table_oid;
      DELETE FROM outbox.commit_hooks h WHERE h.xid = r.xid;
      RAISE WARNING 'pgdrain repair: queue %: stale_notes (%)', v_q.queue, detail;
      INSERT INTO outbox.repairs AS c (queue, cause, repairs, last_repair_at)
      VALUES (v_q.queue, 'stale_notes', 1, v_now)
      ON CONFLICT ON CONSTRAINT repairs_pkey DO UPDATE SET repairs = c.repairs + 1, last_repair_at = EXCLUDED.last_repair_at;
    END IF;
    partition_key := NULL;
    cause := 'stale_notes';
    head_id := NULL;
    RETURN NEXT;
  END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates an operator's reason for an action on rows: a text of at most 1000 characters that is
-- not only white space (spaces, tabs, line breaks, no-break and zero-width spaces), recorded in
-- the row's last_error and in outbox.operator_actions.
CREATE OR REPLACE FUNCTION outbox._check_reason(p_function text, p_reason text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_reason IS NULL OR p_reason !~ '[^[:space:]\u00a0\u200b\ufeff]' OR pg_catalog.length(p_reason) > 1000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'reason must be a non-blank text of at most 1000 characters, got %s',
      COALESCE(pg_catalog.quote_literal(pg_catalog.left(p_reason, 50)), 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The insert behind enqueue and enqueue_event (p_function names the caller in errors): validates
-- the event and inserts it, returning its id (provisional until COMMIT on a partitioned queue, see
-- DESIGN "Identity and order of an event") and its event_id. deliver_at delays the first attempt,
-- at most the queue's max_delay (it is the row's next_attempt_at; on a partitioned queue it holds back the key's later events
-- too, which keep their order). headers (an object of strings) travel with the event to the sink.
CREATE OR REPLACE FUNCTION outbox._enqueue(p_function text, p_queue text, p_event_type text, p_payload jsonb,
                                           p_partition_key text, p_deliver_at timestamptz, p_headers jsonb,
                                           p_event_id uuid)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(p_function, p_queue);
  v_key_column text := '';
  v_key_value text := '';
BEGIN
  -- Blank: white space only (tabs, line breaks, no-break and zero-width spaces too).
  IF p_event_type IS NULL OR p_event_type !~ '[^[:space:]\u00a0\u200b\ufeff]' THEN
    PERFORM outbox._invalid(p_function, 'event_type must be a non-empty string');
  END IF;
  IF p_payload IS NULL THEN
    PERFORM outbox._invalid(p_function, 'payload must not be NULL (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF pg_catalog.jsonb_typeof(p_payload) = 'null' THEN
    PERFORM outbox._invalid(p_function, 'payload must not be JSON null (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF p_deliver_at IN ('infinity', '-infinity') THEN
    PERFORM outbox._invalid(p_function, 'deliver_at must be a finite time (NULL: deliver now)');
  END IF;
  PERFORM outbox._check_delay(p_function, 'deliver_at', v_q, ARRAY[p_deliver_at], false);
  IF p_headers IS NOT NULL AND (pg_catalog.jsonb_typeof(p_headers) <> 'object'
                                OR pg_catalog.jsonb_path_exists(p_headers, '$.* ? (@.type() != "string")')) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'headers must be NULL or a JSON object whose values are strings, got %s', pg_catalog.left(p_headers::text, 200)));
  END IF;
  IF v_q.partition_column IS NULL THEN
    IF p_partition_key IS NOT NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be NULL: queue %s has no partition column', v_q.queue));
    END IF;
  ELSE
    IF p_partition_key IS NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must not be NULL: queue %s is partitioned by %s', v_q.queue, v_q.partition_column));
    END IF;
    IF pg_catalog.btrim(p_partition_key) = '' THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be a non-empty string, got %s', pg_catalog.quote_literal(p_partition_key)));
    END IF;
    v_key_column := pg_catalog.format(', %I', v_q.partition_column);
    v_key_value := pg_catalog.format(', $6::%s', v_q.partition_type);
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO %s AS t (event_type, payload, next_attempt_at, headers, event_id%s)
     VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.gen_random_uuid())%s)
     RETURNING t.id, t.event_id',
    v_q.table_oid::regclass, v_key_column, v_key_value)
    USING p_event_type, p_payload, p_deliver_at, p_headers, p_event_id, p_partition_key;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The version of the outbox schema installed in this database: the release it belongs to and the
-- number of the last migration applied (the file migrations/outbox/NNNNN_*.sql). A client that needs
-- a function added by migration N checks migration >= N before it starts (the Go drainer does).
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 39;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
SELECT outbox._forget_kept_statements();
-- +goose StatementEnd

-- +goose StatementBegin
DROP FUNCTION outbox._keep_poisoned(outbox.queues, bigint[]);
DROP FUNCTION outbox._is_blank(text);
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migrations 00002 and 00003 carry the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__truncate() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__notify() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_runs(text, integer, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked_runs(text, integer, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.queue_info(text) SECURITY DEFINER;
ALTER FUNCTION outbox.poisoned_rows(text, integer, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_waits(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_woke(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_turn(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.poison_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.retry_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.dismiss_poisoned(text, bigint[], text) SECURITY DEFINER;
ALTER FUNCTION outbox.operator_log(text, integer, bigint) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.claim_runs(text, integer, interval, integer),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.claim_locked_runs(text, integer, integer),
  outbox.settle_locked(text, bigint[], text[], text[], timestamptz[])
  TO pgdrain_worker;

-- Operators: read the state, give poisoned rows a fresh start, purge; list the registered queues.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.requeue_poisoned(text, bigint[]),
  outbox.purge_sent(text, interval, integer)
  TO pgdrain_operator;
GRANT SELECT ON outbox.queues TO pgdrain_operator;

-- Workers and operators: a queue's settings, when its next row is due (the drainer's sleep), and the
-- repair pass over its partition heads (the drainer runs it periodically; pgdrain check dry-runs it).
GRANT EXECUTE ON FUNCTION
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.repair(text, boolean)
  TO pgdrain_worker, pgdrain_operator;

-- Workers say when they wait for a NOTIFY of a queue that notifies 'when_waiting' (outbox.set_notify,
-- which like create_queue is granted to nobody), and take turns to claim while rows trickle in.
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint),
  outbox.claim_turn(text, interval)
  TO pgdrain_worker;

-- Workers also read what the Go drainer reports about its queue: the gauges (WithMetrics), wedged
-- partitions (WithWedgeObserver) and the index check at start. All read-only, no payloads.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text)
  TO pgdrain_worker;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.

-- Readers (the operator console's pages, dashboards): the gauges, wedged partitions, the index
-- check, the registered queues and the poisoned rows, never a payload unless granted on the table.
-- Operators read the same, and may end a stuck lease.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.poisoned_rows(text, integer, bigint)
  TO pgdrain_reader;
GRANT SELECT ON outbox.queues TO pgdrain_reader;
GRANT EXECUTE ON FUNCTION
  outbox.poisoned_rows(text, integer, bigint),
  outbox.release_lease(text, bigint)
  TO pgdrain_operator;

-- Operators act on rows that will not move on their own (00025): skip (poison with a reason), retry
-- now, dismiss poisoned rows; every action is fenced and logged, and the log is read by operators
-- and readers.
GRANT EXECUTE ON FUNCTION
  outbox.poison_row(text, bigint, integer, text),
  outbox.retry_row(text, bigint, integer, text),
  outbox.dismiss_poisoned(text, bigint[], text),
  outbox.operator_log(text, integer, bigint)
  TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION outbox.operator_log(text, integer, bigint) TO pgdrain_reader;

-- Everyone who may use the schema reads its version (outbox.version: a constant, no data): the Go
-- drainer checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION outbox.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd
