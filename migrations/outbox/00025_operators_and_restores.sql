-- +goose Up
-- +goose StatementBegin
-- Makes the partition heads of a commit step's new keys (p_keys, p_ids their smallest ids, p_states
-- aligned: only the keys whose state is 'new' are made) and returns the new keys it did not make,
-- which the caller gives wake notes. A head another session made meanwhile is one of them: committed
-- (ON CONFLICT DO NOTHING), or still being made by an open transaction, a claim applying wake notes
-- or rebuilding heads inside a lock-mode batch (outbox._apply_wakes, outbox._restore_heads). The
-- insert would wait on that transaction's index entry until the batch ends (issue 29); it gives up
-- after lock_timeout instead, and makes none of them: a producer never waits for a claim. The
-- subtransaction of the EXCEPTION block is entered only by transactions with new keys.
-- A new head's floor is its smallest id (poisoned rows before it are not walked again) only while
-- the queue's heads are complete and no wake note waits for the key: after a crash "no head" may
-- mean the heads were lost while older rows of the key are still pending, and a note means a
-- producer before us committed rows of the key while a claim was deleting its head (the note is
-- applied by a later claim, which a claim of our row must not overtake). Then the floor is 0 until
-- a claim raises it. So it is under REPEATABLE READ and SERIALIZABLE: their snapshot may miss a
-- note, and not reading the notes keeps a SERIALIZABLE producer's predicate locks off the page
-- other producers' wake notes go to.
CREATE OR REPLACE FUNCTION outbox._make_heads(p_q outbox.queues, p_keys text[], p_ids bigint[], p_states text[])
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET lock_timeout = '1ms'
AS $$
DECLARE
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
  v_floors boolean;
  v_notes boolean;
  v_missed text[];
BEGIN
  -- Asked once per call, not once per key: whether a floor may be the smallest id at all, and
  -- whether any wake note of the queue exists (usually none) before looking for each key's. In
  -- the block, as every read here: a lock timeout on any of them makes no head, never an error.
  v_floors := v_read_committed
    AND EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id);
  v_notes := v_floors AND EXISTS (SELECT 1 FROM outbox.partition_wakes w WHERE w.queue_id = p_q.queue_id);
  WITH made AS (
    INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
    SELECT p_q.queue_id, u.k, u.lo,
           CASE WHEN v_floors
                     AND NOT (v_notes AND EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                                  WHERE w.queue_id = p_q.queue_id AND w.partition_key = u.k))
                THEN u.lo ELSE 0 END
    -- Filtered on the aligned state, not with u.k = ANY (new keys): that compares every key with
    -- every new key (a 192,000-row bulk load of 32,000 new keys spent 9.6 s there).
    FROM unnest(p_keys, p_ids, p_states) AS u(k, lo, state)
    WHERE u.state = 'new'
    ORDER BY u.k
    ON CONFLICT (queue_id, partition_key) DO NOTHING
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(u.k) INTO v_missed
  FROM unnest(p_keys, p_states) AS u(k, state)
  WHERE u.state = 'new' AND u.k NOT IN (SELECT made.partition_key FROM made);
  RETURN v_missed;
EXCEPTION WHEN lock_not_available THEN
  SELECT pg_catalog.array_agg(u.k) INTO v_missed
  FROM unnest(p_keys, p_states) AS u(k, state) WHERE u.state = 'new';
  RETURN v_missed;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Commit step of one partitioned queue for the current transaction (called by
-- outbox._commit_partitions with the keys it wrote and their ids, repeats allowed; p_locked: the
-- commit locks of their hashes are taken, step 1 is done): makes per-key delivery order equal
-- commit order, and gives new keys their partition head.
--
-- 1. Takes the commit lock of every key hash the transaction wrote (hashtext(key) & 65535), held
--    until the commit is complete: the hash's row of outbox.partition_clocks, made or updated in
--    hash order by one INSERT ... ON CONFLICT DO UPDATE, which also raises the clock to our largest
--    id and keeps the value it found in previous_max. A row lock, not an advisory one: a bulk
--    transaction of 20,000 keys locks 20,000 rows without filling the lock table, and producers of
--    other hashes never wait for it. Commits that share a hash are serialised from here on; only
--    commit steps take these locks, all in one order, so they can not deadlock.
-- 2. A key is late when a transaction that committed before us wrote a row of it (or of a key
--    with the same hash) with a larger id than our smallest: the clock keeps the largest committed
--    id per hash, written only under these locks. A late key's rows of this transaction get new
--    ids from the id sequence, in their order, larger than every id already given out: delivered
--    order (id order) is then commit order, and the clock follows them. Not late (the usual case):
--    no row is written twice.
-- 3. Holds each existing head of its keys FOR KEY SHARE until the transaction ends, so that no claim
--    deletes it or raises its floor over our rows before they are visible (a claim takes FOR UPDATE,
--    and skips heads it can not lock, see outbox._refresh_heads); creates the heads of new keys,
--    wakes a head a claim left empty while we were open, and lowers a floor that lies above our
--    rows. It never waits for a claim: a head a claim holds (SKIP LOCKED) gets a wake note in
--    outbox.partition_wakes instead, which the next claim applies once that claim is over.
--    NOTIFY when a partition became claimable (for a queue that notifies 'when_waiting', only while
--    a drainer waits: outbox._drainer_waits).
-- Returns whether it wrote a head or a wake note (and notified).
--
-- The usual transaction, no key late, costs two statements whatever its keys: the locks (the clocks
-- they return compared per hash with our smallest ids) and one probe per key of its head, which
-- keeps only the keys with something to do (none when every key has a head whose floor is below
-- our rows). A late transaction sorts its keys and probes them again after renumbering.
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
-- Heads are not locked there (a lock on a version newer than the snapshot fails with 40001 too,
-- and claims move heads all the time): every key with a head gets a wake note. A SERIALIZABLE
-- transaction whose keys are not late reads no head at all, and every key gets a wake note (see
-- the fast path): its commit step then takes no predicate lock on what other producers or claims
-- write (TestProducers_SerializableCommitStepTakesNoPredicateLockOthersWrite).
CREATE OR REPLACE FUNCTION outbox._commit_keys(p_q outbox.queues, p_keys text[], p_mins bigint[], p_maxs bigint[],
                                              p_locked boolean)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
  v_renumbered boolean := false;
  v_issued bigint;
  v_sequence constant regclass := p_q.id_sequence;
  v_any_late boolean;
  v_late_clocks bigint[];
  -- Per key, aligned with v_keys: what the commit step must do for it (see the probe below).
  v_states text[];
  v_new text[];
  v_fix text[];
  v_contended text[];
  -- Keys whose head another session made or took between our probe and our write.
  v_raced text[];
  v_raced_now text[];
  v_wrote boolean := false;
  v_probed boolean := false;
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
  v_serializable constant boolean := pg_catalog.current_setting('transaction_isolation') = 'serializable';
BEGIN
  v_keys := p_keys;
  v_mins := p_mins;
  v_maxs := p_maxs;
  IF NOT p_locked THEN
    -- The commit locks, and whether any key is late: a hash is late when the clock we found
    -- (previous_max) is above the smallest id we wrote of it. Compared per hash, in hash order
    -- (both sides sorted by slot, one row per slot each): no join, no sort of the keys.
    v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
    WITH noted AS (
      SELECT pg_catalog.hashtext(u.k) & 65535 AS slot, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
      FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
      GROUP BY 1),
    locked AS (
      INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
      SELECT p_q.queue_id, n.slot, GREATEST(p_q.clock_base, LEAST(n.hi, v_issued)), p_q.clock_base
      FROM noted n ORDER BY n.slot
      ON CONFLICT (queue_id, slot) DO UPDATE
        SET previous_max = c.committed_max,
            committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
      RETURNING c.slot, c.previous_max)
    SELECT EXISTS (SELECT 1 FROM unnest((SELECT pg_catalog.array_agg(l.previous_max ORDER BY l.slot) FROM locked l),
                                        (SELECT pg_catalog.array_agg(n.lo ORDER BY n.slot) FROM noted n)) AS x(clock, lo)
                   WHERE x.clock > x.lo)
      INTO v_any_late;
    IF v_any_late THEN
      SELECT pg_catalog.array_agg(n.k ORDER BY n.k), pg_catalog.array_agg(n.lo ORDER BY n.k),
             pg_catalog.array_agg(n.hi ORDER BY n.k)
        INTO v_keys, v_mins, v_maxs
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
            FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi) GROUP BY u.k) n;
    ELSIF v_serializable THEN
      -- SERIALIZABLE, no key late: every key gets a wake note (the next claim makes or fixes its
      -- head), without reading a head. A read takes a predicate lock on the index page other
      -- producers' new heads go into, and claims' updates of a head read here make a read/write
      -- dependency too: unrelated SERIALIZABLE producers failed with 40001 as a chain of them.
      SELECT pg_catalog.array_agg(u.k), pg_catalog.array_agg(u.lo), pg_catalog.array_agg('contended'::text),
             pg_catalog.array_agg(u.k)
        INTO v_keys, v_mins, v_states, v_contended
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo FROM unnest(v_keys, v_mins) AS u(k, lo) GROUP BY u.k) u;
      v_probed := true;
    ELSE
      -- No key is late (the usual case): one probe per key of its head, as in the loop below
      -- (see there), keeping only the keys with something to do (none, for keys whose heads are
      -- fine).
      SELECT pg_catalog.array_agg(u.k) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(u.lo) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(s.state) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'new'),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'fix'),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'contended')
        INTO v_keys, v_mins, v_states, v_new, v_fix, v_contended
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo FROM unnest(v_keys, v_mins) AS u(k, lo) GROUP BY u.k) u
      LEFT JOIN LATERAL (SELECT true AS held, x.head_id, x.floor_id FROM outbox.partition_heads x
                         WHERE v_read_committed AND x.queue_id = p_q.queue_id AND x.partition_key = u.k
                         FOR KEY SHARE SKIP LOCKED) h ON true
      CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                      WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                        THEN 'new'
                                      ELSE 'contended' END AS state
                          OFFSET 0) s;
      v_probed := true;
    END IF;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of its clock as we found it and of its head (LATERAL: index probes whatever
  -- the statistics of these small tables say). Late keys are renumbered, then probed again.
  WHILE NOT v_probed LOOP
    SELECT pg_catalog.bool_or(c.previous_max > u.lo),
           pg_catalog.array_agg(CASE WHEN c.previous_max > u.lo THEN c.previous_max END ORDER BY u.k),
           pg_catalog.array_agg(s.state ORDER BY u.k),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'new'),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'fix'),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'contended')
      INTO v_any_late, v_late_clocks, v_states, v_new, v_fix, v_contended
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    LEFT JOIN LATERAL (SELECT x.previous_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535) c ON true
    -- The head's latest version, held until we commit; none when a claim holds it (or, under
    -- REPEATABLE READ or SERIALIZABLE, always).
    LEFT JOIN LATERAL (SELECT true AS held, x.head_id, x.floor_id FROM outbox.partition_heads x
                       WHERE v_read_committed AND x.queue_id = p_q.queue_id AND x.partition_key = u.k
                       FOR KEY SHARE SKIP LOCKED) h ON true
    -- new: no head yet; fix: a head we hold that a claim left empty, or whose floor is above our
    -- rows; contended: a head a claim holds (a wake note). Whether a head exists is only asked
    -- when we hold none.
    -- OFFSET 0 keeps the state a column computed once per key: pulled up, every aggregate that
    -- reads it ran its own probe of the heads (seven per new key).
    CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                    WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                     WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                      THEN 'new'
                                    ELSE 'contended' END AS state
                        OFFSET 0) s;
    EXIT WHEN NOT v_any_late OR v_renumbered;
    -- v_keys is in key order, and so are the clocks aggregated above and what comes back.
    SELECT pg_catalog.array_agg(r.k ORDER BY r.k), pg_catalog.array_agg(r.lo ORDER BY r.k),
           pg_catalog.array_agg(r.hi ORDER BY r.k)
      INTO v_keys, v_mins, v_maxs
    FROM outbox._renumber_late_rows(p_q, v_sequence, v_keys, v_mins, v_maxs, v_late_clocks) r;
    v_renumbered := true;
    -- The late keys' rows now end above every clock: their clocks follow.
    v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
    UPDATE outbox.partition_clocks c
    SET committed_max = GREATEST(c.committed_max, LEAST(r.hi, v_issued))
    FROM (SELECT pg_catalog.hashtext(u.k) & 65535 AS slot, pg_catalog.max(u.hi) AS hi
          FROM unnest(v_keys, v_maxs, v_late_clocks) AS u(k, hi, clock)
          WHERE u.clock IS NOT NULL GROUP BY 1) r
    WHERE c.queue_id = p_q.queue_id AND c.slot = r.slot;
  END LOOP;

  -- New keys get their heads, a head a claim left empty while we were open is woken, and a floor
  -- above our rows (ids given explicitly, which are not renumbered) is lowered. A head another
  -- session holds or made meanwhile is left to a wake note. NOTIFY when anything was written: a
  -- partition became (or may have become) claimable.
  IF v_new IS NOT NULL THEN
    -- Never waits for a claim's open transaction making the same head (outbox._make_heads): the
    -- keys it did not make get wake notes.
    v_raced := v_raced || outbox._make_heads(p_q, v_keys, v_mins, v_states);
    v_wrote := true;
  END IF;
  IF v_fix IS NOT NULL THEN
    -- One locking probe per key (skipped when a claim took the head since), then the heads updated
    -- by ctid: linear in the keys.
    WITH locked AS (
      SELECT x.tid, u.lo FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
      CROSS JOIN LATERAL (SELECT h.ctid AS tid FROM outbox.partition_heads h
                          WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k
                          FOR NO KEY UPDATE SKIP LOCKED) x
      WHERE u.state = 'fix'),
    fixed AS (
      UPDATE outbox.partition_heads h
      SET head_id = COALESCE(h.head_id, l.lo),
          parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
          floor_id = LEAST(h.floor_id, l.lo)
      FROM locked l
      WHERE h.ctid = l.tid
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_raced_now
    FROM pg_catalog.unnest(v_fix) AS k
    WHERE k NOT IN (SELECT fixed.partition_key FROM fixed);
    v_raced := v_raced || v_raced_now;
    v_wrote := true;
  END IF;
  IF v_contended IS NOT NULL OR v_raced IS NOT NULL THEN
    -- The OR keeps the IN a hashed subplan (a semi-join here would be a nested loop: hash joins
    -- are off in this function).
    INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id)
    SELECT p_q.queue_id, u.k, u.lo FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
    WHERE u.state = 'contended' OR u.k IN (SELECT r.k FROM pg_catalog.unnest(v_raced) AS r(k));
    v_wrote := true;
  END IF;
  IF v_wrote AND outbox._drainer_waits(p_q) THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN v_wrote;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit
-- with the key and id of every row the transaction noted in the queue, see outbox._note_written,
-- aligned, a key may repeat): the keys it wrote go to
-- outbox._commit_keys, which makes per-key delivery order equal commit order and gives new keys
-- their partition head. The usual transactions, one row of a key that has a head or of a new key,
-- not late, are done here in two or three scalar statements: every statement of the commit step is an executor start
-- on the producer's write path (aggregates and CTEs, which the general step needs, cost the most
-- to start), and so is every planner setting a function pins.
-- Returns whether it wrote a head or a wake note (and notified).
CREATE OR REPLACE FUNCTION outbox._commit_partitions(p_q outbox.queues, p_keys text[], p_ids bigint[])
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
AS $$
DECLARE
  v_key text;
  v_id bigint;
  v_previous bigint;
  v_head bigint;
  v_floor bigint;
BEGIN
  -- SERIALIZABLE: outbox._commit_keys, which reads nothing other producers write.
  IF pg_catalog.cardinality(p_keys) = 1 AND pg_catalog.current_setting('transaction_isolation') <> 'serializable' THEN
    -- The commit lock of the key's hash, taken and the clock raised as outbox._commit_keys does.
    v_key := p_keys[1];
    v_id := p_ids[1];
    INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
    VALUES (p_q.queue_id, pg_catalog.hashtext(v_key) & 65535,
            GREATEST(p_q.clock_base, LEAST(v_id, pg_catalog.pg_sequence_last_value(p_q.id_sequence))),
            p_q.clock_base)
    ON CONFLICT (queue_id, slot) DO UPDATE
      SET previous_max = c.committed_max,
          committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
    RETURNING c.previous_max INTO v_previous;
    IF v_previous <= v_id AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
      SELECT x.head_id, x.floor_id INTO v_head, v_floor
      FROM outbox.partition_heads x
      WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_key
      FOR KEY SHARE SKIP LOCKED;
      IF v_head IS NOT NULL AND v_floor <= v_id THEN
        RETURN false;
      END IF;
      -- A new key (the other usual case): its head, made as outbox._commit_keys makes it. A head
      -- that exists (a claim holds it, or it needs a fix) is left to outbox._commit_keys, also one
      -- a claim's open transaction deleted: the probe above skips it (locked), this snapshot still
      -- sees it, and an insert of the key would wait on that transaction's index entry (issue 29: a
      -- lock-mode batch that delivered a key's last row held its producers at COMMIT).
      IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                   WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_key) THEN
        IF outbox._make_heads(p_q, p_keys, p_ids, '{new}') IS NOT NULL THEN
          -- Made meanwhile by another session, maybe a claim's open transaction: a wake note.
          INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id) VALUES (p_q.queue_id, v_key, v_id);
        END IF;
        IF outbox._drainer_waits(p_q) THEN
          PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
        END IF;
        RETURN true;
      END IF;
    END IF;
    RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, true);
  END IF;

  RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, false);
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
-- p_retry_at (NULL, or aligned with p_ids; NULL elements = backoff) sets a transient row's next
-- attempt to a time the caller chose (a peer's Retry-After), never earlier than the clock.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[], p_retry_at timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
         AS u(id, token, outcome, err, retry_at)),
     decided AS (
       SELECT i.*, CASE
                WHEN i.outcome = ''sent'' THEN NULL
                WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
                -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts
                -- while it was leased stays poisoned.
                ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END AS attempts
       FROM input i JOIN %1$s t ON t.id = i.id),
     upd AS (
       UPDATE %1$s t SET
         sent_at = CASE WHEN d.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = COALESCE(d.attempts, t.attempt_count),
         next_attempt_at = CASE
           WHEN d.outcome = ''sent'' THEN t.next_attempt_at
           WHEN d.attempts >= $6 THEN NULL
           WHEN d.retry_at IS NOT NULL THEN GREATEST(d.retry_at, $10)
           ELSE $10 + outbox._backoff(d.attempts, $8, $9) END,
         last_error = CASE WHEN d.outcome = ''sent'' THEN NULL ELSE d.err END,
         leased_until = NULL,
         lease_token = NULL
       FROM decided d
       WHERE t.id = d.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = d.token)
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END),
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
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), queued by the first note of a transaction (see
-- outbox._note_written and the generated heads triggers), fires at COMMIT. It takes every note of
-- the transaction and hands each partitioned queue's keys and ids to outbox._commit_partitions in
-- queue_id order: the commit locks of all transactions are taken in one global order, and
-- committing transactions never deadlock.
-- Immediate constraints (SET CONSTRAINTS ALL IMMEDIATE, which ORMs and migration tools issue) fire
-- it inside the producing statement that queued it (trigger depth above 1): it then defers itself
-- to COMMIT (sets its own constraint DEFERRED and queues itself again) and takes no lock. Run there,
-- it would hold its commit locks until the transaction ends, and two producers writing two keys in
-- opposite order would deadlock (issue 29). SET CONSTRAINTS ... IMMEDIATE after rows were written
-- still runs it at once, at depth 1 (its locks are then held until the transaction ends); rows
-- written after that queue it again, for COMMIT.
-- Few statements, each simple, by index (these tables churn, and their statistics say they are
-- empty): every one is an executor start on the producer's write path.
CREATE OR REPLACE FUNCTION outbox.tg_queue__commit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
  v_notes outbox.commit_notes[];
  v_q outbox.queues;
  v_merged record;
  v_notified boolean;
  v_hook tid;
  v_oids oid[];
  v_keys text[];
  v_ids bigint[];
  v_requeued outbox.commit_hooks;
BEGIN
  IF pg_catalog.pg_trigger_depth() > 1 THEN
    SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
    -- Found by the arbiter and moved by ctid, as below: no predicate lock in SERIALIZABLE.
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (NEW.xid)
    ON CONFLICT (xid) DO UPDATE SET xid = EXCLUDED.xid
    RETURNING h.ctid INTO v_hook;
    DELETE FROM outbox.commit_hooks h WHERE h.ctid = v_hook RETURNING h.* INTO v_requeued;
    INSERT INTO outbox.commit_hooks VALUES (v_requeued.*);
    RETURN NULL;
  END IF;
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- The notes are in the hook (outbox._note_written), which is found by the arbiter of its
    -- primary key and deleted by ctid: neither takes a predicate lock (an index scan would lock
    -- the page the next producer's hook goes into, a read/write dependency on it; three
    -- overlapping producers of unrelated keys then failed with 40001). No note rows to read.
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (NEW.xid)
    ON CONFLICT (xid) DO UPDATE SET xid = EXCLUDED.xid
    RETURNING h.ctid, h.table_oids, h.keys, h.ids INTO v_hook, v_oids, v_keys, v_ids;
    DELETE FROM outbox.commit_hooks h WHERE h.ctid = v_hook;
  ELSE
    DELETE FROM outbox.commit_hooks h WHERE h.xid = NEW.xid;
    -- The whole row (RETURNING n), not its columns: an array of the CTE's own row type would be
    -- converted to outbox.commit_notes[] through text, element by element (about 3 µs a commit).
    WITH taken AS (DELETE FROM outbox.commit_notes n WHERE n.xid = NEW.xid RETURNING n)
    SELECT pg_catalog.array_agg(t.n) INTO v_notes FROM taken t;
    -- One statement (the usual transaction): its queue, and its keys and ids as noted.
    -- The transaction may have dropped a table it wrote: nothing of it is left to order.
    IF pg_catalog.cardinality(v_notes) = 1 THEN
      SELECT * INTO v_q FROM outbox.queues q
      WHERE q.table_oid = v_notes[1].table_oid AND q.partition_column IS NOT NULL
        AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL;
      IF FOUND THEN
        v_notified := outbox._commit_partitions(v_q, v_notes[1].keys, v_notes[1].ids);
      END IF;
      RETURN NULL;
    END IF;
  END IF;
  -- Many statements, maybe several queues (or a SERIALIZABLE transaction's hook): each queue's
  -- keys and ids, merged.
  FOR v_merged IN
    SELECT q, m.keys, m.ids
    FROM (SELECT u.table_oid, pg_catalog.array_agg(u.k) AS keys, pg_catalog.array_agg(u.id) AS ids
          FROM (SELECT n.table_oid, x.k, x.id
                FROM pg_catalog.unnest(v_notes) n CROSS JOIN LATERAL unnest(n.keys, n.ids) AS x(k, id)
                UNION ALL
                SELECT * FROM unnest(v_oids, v_keys, v_ids)) AS u(table_oid, k, id)
          GROUP BY u.table_oid) m
    JOIN outbox.queues q ON q.table_oid = m.table_oid
    WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
    ORDER BY q.queue_id
  LOOP
    v_notified := outbox._commit_partitions(v_merged.q, v_merged.keys, v_merged.ids);
  END LOOP;
  RETURN NULL;
END;
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
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
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

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
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
-- which like create_queue is granted to nobody).
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint)
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
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Commit step of one partitioned queue for the current transaction (called by
-- outbox._commit_partitions with the keys it wrote and their ids, repeats allowed; p_locked: the
-- commit locks of their hashes are taken, step 1 is done): makes per-key delivery order equal
-- commit order, and gives new keys their partition head.
--
-- 1. Takes the commit lock of every key hash the transaction wrote (hashtext(key) & 65535), held
--    until the commit is complete: the hash's row of outbox.partition_clocks, made or updated in
--    hash order by one INSERT ... ON CONFLICT DO UPDATE, which also raises the clock to our largest
--    id and keeps the value it found in previous_max. A row lock, not an advisory one: a bulk
--    transaction of 20,000 keys locks 20,000 rows without filling the lock table, and producers of
--    other hashes never wait for it. Commits that share a hash are serialised from here on; only
--    commit steps take these locks, all in one order, so they can not deadlock.
-- 2. A key is late when a transaction that committed before us wrote a row of it (or of a key
--    with the same hash) with a larger id than our smallest: the clock keeps the largest committed
--    id per hash, written only under these locks. A late key's rows of this transaction get new
--    ids from the id sequence, in their order, larger than every id already given out: delivered
--    order (id order) is then commit order, and the clock follows them. Not late (the usual case):
--    no row is written twice.
-- 3. Holds each existing head of its keys FOR KEY SHARE until the transaction ends, so that no claim
--    deletes it or raises its floor over our rows before they are visible (a claim takes FOR UPDATE,
--    and skips heads it can not lock, see outbox._refresh_heads); creates the heads of new keys,
--    wakes a head a claim left empty while we were open, and lowers a floor that lies above our
--    rows. It never waits for a claim: a head a claim holds (SKIP LOCKED) gets a wake note in
--    outbox.partition_wakes instead, which the next claim applies once that claim is over.
--    NOTIFY when a partition became claimable (for a queue that notifies 'when_waiting', only while
--    a drainer waits: outbox._drainer_waits).
-- Returns whether it wrote a head or a wake note (and notified).
--
-- The usual transaction, no key late, costs two statements whatever its keys: the locks (the clocks
-- they return compared per hash with our smallest ids) and one probe per key of its head, which
-- keeps only the keys with something to do (none when every key has a head whose floor is below
-- our rows). A late transaction sorts its keys and probes them again after renumbering.
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
-- Heads are not locked there (a lock on a version newer than the snapshot fails with 40001 too,
-- and claims move heads all the time): every key with a head gets a wake note. A SERIALIZABLE
-- transaction whose keys are not late reads no head at all, and every key gets a wake note (see
-- the fast path): its commit step then takes no predicate lock on what other producers or claims
-- write (TestProducers_SerializableCommitStepTakesNoPredicateLockOthersWrite).
CREATE OR REPLACE FUNCTION outbox._commit_keys(p_q outbox.queues, p_keys text[], p_mins bigint[], p_maxs bigint[],
                                              p_locked boolean)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
  v_renumbered boolean := false;
  v_issued bigint;
  v_sequence constant regclass := p_q.id_sequence;
  v_any_late boolean;
  v_late_clocks bigint[];
  -- Per key, aligned with v_keys: what the commit step must do for it (see the probe below).
  v_states text[];
  v_new text[];
  v_fix text[];
  v_contended text[];
  -- Keys whose head another session made or took between our probe and our write.
  v_raced text[];
  v_raced_now text[];
  v_wrote boolean := false;
  v_probed boolean := false;
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
  v_serializable constant boolean := pg_catalog.current_setting('transaction_isolation') = 'serializable';
BEGIN
  v_keys := p_keys;
  v_mins := p_mins;
  v_maxs := p_maxs;
  IF NOT p_locked THEN
    -- The commit locks, and whether any key is late: a hash is late when the clock we found
    -- (previous_max) is above the smallest id we wrote of it. Compared per hash, in hash order
    -- (both sides sorted by slot, one row per slot each): no join, no sort of the keys.
    v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
    WITH noted AS (
      SELECT pg_catalog.hashtext(u.k) & 65535 AS slot, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
      FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
      GROUP BY 1),
    locked AS (
      INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
      SELECT p_q.queue_id, n.slot, GREATEST(p_q.clock_base, LEAST(n.hi, v_issued)), p_q.clock_base
      FROM noted n ORDER BY n.slot
      ON CONFLICT (queue_id, slot) DO UPDATE
        SET previous_max = c.committed_max,
            committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
      RETURNING c.slot, c.previous_max)
    SELECT EXISTS (SELECT 1 FROM unnest((SELECT pg_catalog.array_agg(l.previous_max ORDER BY l.slot) FROM locked l),
                                        (SELECT pg_catalog.array_agg(n.lo ORDER BY n.slot) FROM noted n)) AS x(clock, lo)
                   WHERE x.clock > x.lo)
      INTO v_any_late;
    IF v_any_late THEN
      SELECT pg_catalog.array_agg(n.k ORDER BY n.k), pg_catalog.array_agg(n.lo ORDER BY n.k),
             pg_catalog.array_agg(n.hi ORDER BY n.k)
        INTO v_keys, v_mins, v_maxs
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
            FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi) GROUP BY u.k) n;
    ELSIF v_serializable THEN
      -- SERIALIZABLE, no key late: every key gets a wake note (the next claim makes or fixes its
      -- head), without reading a head. A read takes a predicate lock on the index page other
      -- producers' new heads go into, and claims' updates of a head read here make a read/write
      -- dependency too: unrelated SERIALIZABLE producers failed with 40001 as a chain of them.
      SELECT pg_catalog.array_agg(u.k), pg_catalog.array_agg(u.lo), pg_catalog.array_agg('contended'::text),
             pg_catalog.array_agg(u.k)
        INTO v_keys, v_mins, v_states, v_contended
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo FROM unnest(v_keys, v_mins) AS u(k, lo) GROUP BY u.k) u;
      v_probed := true;
    ELSE
      -- No key is late (the usual case): one probe per key of its head, as in the loop below
      -- (see there), keeping only the keys with something to do (none, for keys whose heads are
      -- fine).
      SELECT pg_catalog.array_agg(u.k) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(u.lo) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(s.state) FILTER (WHERE s.state IS NOT NULL),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'new'),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'fix'),
             pg_catalog.array_agg(u.k) FILTER (WHERE s.state = 'contended')
        INTO v_keys, v_mins, v_states, v_new, v_fix, v_contended
      FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo FROM unnest(v_keys, v_mins) AS u(k, lo) GROUP BY u.k) u
      LEFT JOIN LATERAL (SELECT true AS held, x.head_id, x.floor_id FROM outbox.partition_heads x
                         WHERE v_read_committed AND x.queue_id = p_q.queue_id AND x.partition_key = u.k
                         FOR KEY SHARE SKIP LOCKED) h ON true
      CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                      WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                        THEN 'new'
                                      ELSE 'contended' END AS state
                          OFFSET 0) s;
      v_probed := true;
    END IF;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of its clock as we found it and of its head (LATERAL: index probes whatever
  -- the statistics of these small tables say). Late keys are renumbered, then probed again.
  WHILE NOT v_probed LOOP
    SELECT pg_catalog.bool_or(c.previous_max > u.lo),
           pg_catalog.array_agg(CASE WHEN c.previous_max > u.lo THEN c.previous_max END ORDER BY u.k),
           pg_catalog.array_agg(s.state ORDER BY u.k),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'new'),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'fix'),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE s.state = 'contended')
      INTO v_any_late, v_late_clocks, v_states, v_new, v_fix, v_contended
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    LEFT JOIN LATERAL (SELECT x.previous_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535) c ON true
    -- The head's latest version, held until we commit; none when a claim holds it (or, under
    -- REPEATABLE READ or SERIALIZABLE, always).
    LEFT JOIN LATERAL (SELECT true AS held, x.head_id, x.floor_id FROM outbox.partition_heads x
                       WHERE v_read_committed AND x.queue_id = p_q.queue_id AND x.partition_key = u.k
                       FOR KEY SHARE SKIP LOCKED) h ON true
    -- new: no head yet; fix: a head we hold that a claim left empty, or whose floor is above our
    -- rows; contended: a head a claim holds (a wake note). Whether a head exists is only asked
    -- when we hold none.
    -- OFFSET 0 keeps the state a column computed once per key: pulled up, every aggregate that
    -- reads it ran its own probe of the heads (seven per new key).
    CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                    WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                     WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                      THEN 'new'
                                    ELSE 'contended' END AS state
                        OFFSET 0) s;
    EXIT WHEN NOT v_any_late OR v_renumbered;
    -- v_keys is in key order, and so are the clocks aggregated above and what comes back.
    SELECT pg_catalog.array_agg(r.k ORDER BY r.k), pg_catalog.array_agg(r.lo ORDER BY r.k),
           pg_catalog.array_agg(r.hi ORDER BY r.k)
      INTO v_keys, v_mins, v_maxs
    FROM outbox._renumber_late_rows(p_q, v_sequence, v_keys, v_mins, v_maxs, v_late_clocks) r;
    v_renumbered := true;
    -- The late keys' rows now end above every clock: their clocks follow.
    v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
    UPDATE outbox.partition_clocks c
    SET committed_max = GREATEST(c.committed_max, LEAST(r.hi, v_issued))
    FROM (SELECT pg_catalog.hashtext(u.k) & 65535 AS slot, pg_catalog.max(u.hi) AS hi
          FROM unnest(v_keys, v_maxs, v_late_clocks) AS u(k, hi, clock)
          WHERE u.clock IS NOT NULL GROUP BY 1) r
    WHERE c.queue_id = p_q.queue_id AND c.slot = r.slot;
  END LOOP;

  -- New keys get their heads, a head a claim left empty while we were open is woken, and a floor
  -- above our rows (ids given explicitly, which are not renumbered) is lowered. A head another
  -- session holds or made meanwhile is left to a wake note. NOTIFY when anything was written: a
  -- partition became (or may have become) claimable.
  IF v_new IS NOT NULL THEN
    -- A new head's floor is our smallest id (poisoned rows before it are not walked again) only
    -- while the queue's heads are complete and no wake note waits for the key: after a crash "no
    -- head" may mean the heads were lost while older rows of the key are still pending, and a note
    -- means a producer before us committed rows of the key while a claim was deleting its head
    -- (the note is applied by a later claim, which a claim of our row must not overtake). Then the
    -- floor is 0 until a claim raises it. So it is under REPEATABLE READ and SERIALIZABLE: their
    -- snapshot may miss a note, and not reading the notes keeps a SERIALIZABLE producer's predicate
    -- locks off the page other producers' wake notes go to (two producers that each made a new head
    -- and a wake note failed as a read/write cycle).
    WITH made AS (
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo,
             CASE WHEN v_read_committed
                       AND EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                       AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                       WHERE w.queue_id = p_q.queue_id AND w.partition_key = u.k)
                  THEN u.lo ELSE 0 END
      -- Filtered on the aligned state, not with u.k = ANY (v_new): that compares every key with
      -- every new key (a 192,000-row bulk load of 32,000 new keys spent 9.6 s here).
      FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
      WHERE u.state = 'new'
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_raced_now FROM pg_catalog.unnest(v_new) AS k
    WHERE k NOT IN (SELECT made.partition_key FROM made);
    v_raced := v_raced || v_raced_now;
    v_wrote := true;
  END IF;
  IF v_fix IS NOT NULL THEN
    -- One locking probe per key (skipped when a claim took the head since), then the heads updated
    -- by ctid: linear in the keys.
    WITH locked AS (
      SELECT x.tid, u.lo FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
      CROSS JOIN LATERAL (SELECT h.ctid AS tid FROM outbox.partition_heads h
                          WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k
                          FOR NO KEY UPDATE SKIP LOCKED) x
      WHERE u.state = 'fix'),
    fixed AS (
      UPDATE outbox.partition_heads h
      SET head_id = COALESCE(h.head_id, l.lo),
          parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
          floor_id = LEAST(h.floor_id, l.lo)
      FROM locked l
      WHERE h.ctid = l.tid
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_raced_now
    FROM pg_catalog.unnest(v_fix) AS k
    WHERE k NOT IN (SELECT fixed.partition_key FROM fixed);
    v_raced := v_raced || v_raced_now;
    v_wrote := true;
  END IF;
  IF v_contended IS NOT NULL OR v_raced IS NOT NULL THEN
    -- The OR keeps the IN a hashed subplan (a semi-join here would be a nested loop: hash joins
    -- are off in this function).
    INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id)
    SELECT p_q.queue_id, u.k, u.lo FROM unnest(v_keys, v_mins, v_states) AS u(k, lo, state)
    WHERE u.state = 'contended' OR u.k IN (SELECT r.k FROM pg_catalog.unnest(v_raced) AS r(k));
    v_wrote := true;
  END IF;
  IF v_wrote AND outbox._drainer_waits(p_q) THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN v_wrote;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit
-- with the key and id of every row the transaction noted in the queue, see outbox._note_written,
-- aligned, a key may repeat): the keys it wrote go to
-- outbox._commit_keys, which makes per-key delivery order equal commit order and gives new keys
-- their partition head. The usual transactions, one row of a key that has a head or of a new key,
-- not late, are done here in two or three scalar statements: every statement of the commit step is an executor start
-- on the producer's write path (aggregates and CTEs, which the general step needs, cost the most
-- to start), and so is every planner setting a function pins.
-- Returns whether it wrote a head or a wake note (and notified).
CREATE OR REPLACE FUNCTION outbox._commit_partitions(p_q outbox.queues, p_keys text[], p_ids bigint[])
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
AS $$
DECLARE
  v_key text;
  v_id bigint;
  v_previous bigint;
  v_head bigint;
  v_floor bigint;
BEGIN
  -- SERIALIZABLE: outbox._commit_keys, which reads nothing other producers write.
  IF pg_catalog.cardinality(p_keys) = 1 AND pg_catalog.current_setting('transaction_isolation') <> 'serializable' THEN
    -- The commit lock of the key's hash, taken and the clock raised as outbox._commit_keys does.
    v_key := p_keys[1];
    v_id := p_ids[1];
    INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
    VALUES (p_q.queue_id, pg_catalog.hashtext(v_key) & 65535,
            GREATEST(p_q.clock_base, LEAST(v_id, pg_catalog.pg_sequence_last_value(p_q.id_sequence))),
            p_q.clock_base)
    ON CONFLICT (queue_id, slot) DO UPDATE
      SET previous_max = c.committed_max,
          committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
    RETURNING c.previous_max INTO v_previous;
    IF v_previous <= v_id AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
      SELECT x.head_id, x.floor_id INTO v_head, v_floor
      FROM outbox.partition_heads x
      WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_key
      FOR KEY SHARE SKIP LOCKED;
      IF v_head IS NOT NULL AND v_floor <= v_id THEN
        RETURN false;
      END IF;
      -- A new key (the other usual case): its head, made as outbox._commit_keys makes it. A head
      -- that exists (a claim holds it, or it needs a fix) is left to outbox._commit_keys, also one
      -- a claim's open transaction deleted: the probe above skips it (locked), this snapshot still
      -- sees it, and an insert of the key would wait on that transaction's index entry (issue 29: a
      -- lock-mode batch that delivered a key's last row held its producers at COMMIT).
      IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                   WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_key) THEN
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        SELECT p_q.queue_id, v_key, v_id,
               CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                         AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                         WHERE w.queue_id = p_q.queue_id AND w.partition_key = v_key)
                    THEN v_id ELSE 0 END
        ON CONFLICT (queue_id, partition_key) DO NOTHING;
        IF FOUND THEN
          IF outbox._drainer_waits(p_q) THEN
            PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
          END IF;
          RETURN true;
        END IF;
      END IF;
    END IF;
    RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, true);
  END IF;

  RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, false);
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
-- not a deadline: it stays now(), the time of the transaction that made the row sent.
-- p_retry_at (NULL, or aligned with p_ids; NULL elements = backoff) sets a transient row's next
-- attempt to a time the caller chose (a peer's Retry-After), never earlier than the clock.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[], p_retry_at timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
         AS u(id, token, outcome, err, retry_at)),
     decided AS (
       SELECT i.*, CASE
                WHEN i.outcome = ''sent'' THEN NULL
                WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
                -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts
                -- while it was leased stays poisoned.
                ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END AS attempts
       FROM input i JOIN %1$s t ON t.id = i.id),
     upd AS (
       UPDATE %1$s t SET
         sent_at = CASE WHEN d.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = COALESCE(d.attempts, t.attempt_count),
         next_attempt_at = CASE
           WHEN d.outcome = ''sent'' THEN t.next_attempt_at
           WHEN d.attempts >= $6 THEN NULL
           WHEN d.retry_at IS NOT NULL THEN GREATEST(d.retry_at, $10)
           ELSE $10 + outbox._backoff(d.attempts, $8, $9) END,
         last_error = CASE WHEN d.outcome = ''sent'' THEN t.last_error ELSE d.err END,
         leased_until = NULL,
         lease_token = NULL
       FROM decided d
       WHERE t.id = d.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = d.token)
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END),
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
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), queued by the first note of a transaction (see
-- outbox._note_written and the generated heads triggers), fires at COMMIT. It takes every note of
-- the transaction and hands each partitioned queue's keys and ids to outbox._commit_partitions in
-- queue_id order: the commit locks of all transactions are taken in one global order, and
-- committing transactions never deadlock.
-- SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE runs it earlier (its locks are then held until
-- the transaction ends); rows written after that are noted, and queue it, again.
-- Few statements, each simple, by index (these tables churn, and their statistics say they are
-- empty): every one is an executor start on the producer's write path.
CREATE OR REPLACE FUNCTION outbox.tg_queue__commit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
  v_notes outbox.commit_notes[];
  v_q outbox.queues;
  v_merged record;
  v_notified boolean;
  v_hook tid;
  v_oids oid[];
  v_keys text[];
  v_ids bigint[];
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- The notes are in the hook (outbox._note_written), which is found by the arbiter of its
    -- primary key and deleted by ctid: neither takes a predicate lock (an index scan would lock
    -- the page the next producer's hook goes into, a read/write dependency on it; three
    -- overlapping producers of unrelated keys then failed with 40001). No note rows to read.
    INSERT INTO outbox.commit_hooks AS h (xid) VALUES (NEW.xid)
    ON CONFLICT (xid) DO UPDATE SET xid = EXCLUDED.xid
    RETURNING h.ctid, h.table_oids, h.keys, h.ids INTO v_hook, v_oids, v_keys, v_ids;
    DELETE FROM outbox.commit_hooks h WHERE h.ctid = v_hook;
  ELSE
    DELETE FROM outbox.commit_hooks h WHERE h.xid = NEW.xid;
    -- The whole row (RETURNING n), not its columns: an array of the CTE's own row type would be
    -- converted to outbox.commit_notes[] through text, element by element (about 3 µs a commit).
    WITH taken AS (DELETE FROM outbox.commit_notes n WHERE n.xid = NEW.xid RETURNING n)
    SELECT pg_catalog.array_agg(t.n) INTO v_notes FROM taken t;
    -- One statement (the usual transaction): its queue, and its keys and ids as noted.
    -- The transaction may have dropped a table it wrote: nothing of it is left to order.
    IF pg_catalog.cardinality(v_notes) = 1 THEN
      SELECT * INTO v_q FROM outbox.queues q
      WHERE q.table_oid = v_notes[1].table_oid AND q.partition_column IS NOT NULL
        AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL;
      IF FOUND THEN
        v_notified := outbox._commit_partitions(v_q, v_notes[1].keys, v_notes[1].ids);
      END IF;
      RETURN NULL;
    END IF;
  END IF;
  -- Many statements, maybe several queues (or a SERIALIZABLE transaction's hook): each queue's
  -- keys and ids, merged.
  FOR v_merged IN
    SELECT q, m.keys, m.ids
    FROM (SELECT u.table_oid, pg_catalog.array_agg(u.k) AS keys, pg_catalog.array_agg(u.id) AS ids
          FROM (SELECT n.table_oid, x.k, x.id
                FROM pg_catalog.unnest(v_notes) n CROSS JOIN LATERAL unnest(n.keys, n.ids) AS x(k, id)
                UNION ALL
                SELECT * FROM unnest(v_oids, v_keys, v_ids)) AS u(table_oid, k, id)
          GROUP BY u.table_oid) m
    JOIN outbox.queues q ON q.table_oid = m.table_oid
    WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
    ORDER BY q.queue_id
  LOOP
    v_notified := outbox._commit_partitions(v_merged.q, v_merged.keys, v_merged.ids);
  END LOOP;
  RETURN NULL;
END;
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
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
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

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
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
-- which like create_queue is granted to nobody).
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint)
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
-- +goose StatementEnd

