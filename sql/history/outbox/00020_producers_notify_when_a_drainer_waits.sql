-- +goose Up
-- +goose StatementBegin
-- When producers NOTIFY: 'always' (every insert of an unpartitioned queue, every commit that made a
-- partition claimable), or 'when_waiting': only while a drainer waits for one (outbox.set_notify).
ALTER TABLE outbox.queues ADD COLUMN notify text NOT NULL DEFAULT 'always'
  CONSTRAINT queues_notify_check CHECK (notify IN ('always', 'when_waiting'));
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether a producer of a queue that notifies 'when_waiting' (outbox.set_notify) must NOTIFY: a
-- drainer said it waits for one (outbox.drainer_waits) and has not been woken since. Takes the
-- queue's notify gate shared, held until the transaction ends: a drainer marks itself waiting only
-- while no producer holds it, so a producer that found no drainer waiting commits (its rows
-- visible) before any drainer can start to wait, and that drainer's claim after marking sees them.
-- A shared lock never waits for another producer; it waits for a drainer only while one marks
-- itself, which is one setval inside outbox.drainer_waits (never a drainer's transaction or
-- latency). Queues that notify 'always' answer true without a lock.
-- Arguments: the queue, and its drainer_waits_q<queue_id> sequence.
CREATE OR REPLACE FUNCTION outbox._drainer_waits(p_q outbox.queues)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
BEGIN
  IF p_q.notify = 'always' THEN
    RETURN true;
  END IF;
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_q.queue_id, -4);
  RETURN COALESCE(pg_catalog.pg_sequence_last_value(
                    pg_catalog.to_regclass('outbox.drainer_waits_q' || p_q.queue_id)), 0)
         > (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a queue its NOTIFY machinery as its registration says: the sequence in which drainers say
-- until when they wait (outbox.drainer_waits_q<queue_id>, UNLOGGED: not versioned, so a producer in
-- any snapshot reads the latest value, and moving it leaves no dead tuple and no WAL; after a crash
-- it starts from nothing, which reads as "nobody waits" while the drainers' LISTEN connections
-- reconnect, and reconnecting wakes them), readable by every producer; and for an unpartitioned
-- queue the statement trigger pgdrain_notify (outbox.tg_queue__notify), whose arguments say whether
-- it notifies always or only when a drainer waits. A partitioned queue has no NOTIFY trigger: its
-- commit step notifies (outbox._commit_keys).
-- Made by create_queue and outbox.set_notify; dropped by drop_queue.
CREATE OR REPLACE FUNCTION outbox._install_notify_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  v_sequence constant text := 'outbox.' || pg_catalog.quote_ident('drainer_waits_q' || p_q.queue_id);
  v_rel constant regclass := p_q.table_oid::regclass;
BEGIN
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS %s', v_sequence);
  EXECUTE pg_catalog.format('GRANT SELECT ON SEQUENCE %s TO PUBLIC', v_sequence);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
  IF p_q.partition_column IS NOT NULL THEN
    RETURN;
  END IF;
  IF p_q.notify = 'always' THEN
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, p_q.channel, p_q.queue);
  ELSE
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L, %L, %L)', v_rel, p_q.channel, p_q.queue,
      p_q.queue_id, v_sequence::regclass::oid);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A drainer of a queue that notifies 'when_waiting' (outbox.set_notify) says it is about to wait up
-- to `wait` for a NOTIFY, so that producers send one. Returns its mark, a number that is 0 when the
-- queue notifies 'always' (nothing to say: wait as usual) and NULL when a producer is between its
-- check and its commit: then look again soon (claim, and call this again), do not wait long. After
-- a mark, claim once more before waiting: rows that committed before the mark sent no NOTIFY. Pass
-- the mark to outbox.drainer_woke when a NOTIFY wakes the drainer.
-- Why nothing is missed: a producer checks for a mark holding the queue's notify gate shared until
-- it commits (outbox._drainer_waits); this takes the gate exclusively without waiting, so it marks
-- only when no producer is between its check and its commit, and each producer either sees the mark
-- (and notifies) or committed before it (and the claim after the mark sees its rows).
-- The gate is held for the call only, whatever transaction it runs in.
-- Marks only grow: a later mark replaces an earlier one, even a longer one, so drainer_woke of a
-- drainer never clears another's mark.
CREATE OR REPLACE FUNCTION outbox.drainer_waits(queue text, wait interval)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
  v_mark bigint;
BEGIN
  IF wait IS NULL OR wait <= interval '0' OR wait > interval '1 day' THEN
    RAISE EXCEPTION 'drainer_waits: wait must be positive and at most 1 day, got %', COALESCE(wait::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_waits', queue);
  IF v_q.notify = 'always' THEN
    RETURN 0;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL THEN
    RAISE EXCEPTION 'drainer_waits: queue % has no sequence outbox.drainer_waits_q% (call outbox.set_notify again)',
      v_q.queue, v_q.queue_id USING ERRCODE = '55000';
  END IF;
  -- The gate is taken for this call only (a session lock, released on every way out; a
  -- transaction lock would make producers that must notify wait for the caller's transaction).
  IF NOT pg_catalog.pg_try_advisory_lock(1885823232 + v_q.queue_id, -4) THEN
    RETURN NULL;
  END IF;
  BEGIN
    v_mark := GREATEST(COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0) + 1,
                       (EXTRACT(epoch FROM pg_catalog.clock_timestamp() + wait) * 1000)::bigint);
    PERFORM pg_catalog.setval(v_sequence, v_mark);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RAISE;
  END;
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
  RETURN v_mark;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A drainer that outbox.drainer_waits marked as waiting was woken by a NOTIFY: producers stop
-- notifying, unless another drainer marked itself since (marks only grow, so its mark is then not
-- this one: every drainer that LISTENs on the channel got the same NOTIFY, so clearing after one is
-- safe only when nobody marked after it). Skipped when a producer holds the notify gate (the mark
-- then expires by itself). A mark of 0 (a queue that notifies 'always') does nothing.
CREATE OR REPLACE FUNCTION outbox.drainer_woke(queue text, mark bigint)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues;
  v_sequence regclass;
BEGIN
  IF mark IS NULL OR mark < 0 THEN
    RAISE EXCEPTION 'drainer_woke: mark must be a mark outbox.drainer_waits returned (0 or more), got %',
      COALESCE(mark::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('drainer_woke', queue);
  IF mark = 0 OR v_q.notify = 'always' THEN
    RETURN;
  END IF;
  v_sequence := pg_catalog.to_regclass('outbox.drainer_waits_q' || v_q.queue_id);
  IF v_sequence IS NULL OR NOT pg_catalog.pg_try_advisory_lock(1885823232 + v_q.queue_id, -4) THEN
    RETURN;
  END IF;
  BEGIN
    IF pg_catalog.pg_sequence_last_value(v_sequence) = mark THEN
      PERFORM pg_catalog.setval(v_sequence, 1);
    END IF;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
    RAISE;
  END;
  PERFORM pg_catalog.pg_advisory_unlock(1885823232 + v_q.queue_id, -4);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- When a queue's producers NOTIFY its channel:
--   'always' (the default): every insert of an unpartitioned queue, every commit that made a
--     partition of a partitioned queue claimable. Any LISTENing client is woken.
--   'when_waiting': only while a drainer waits for a NOTIFY, which it says with outbox.drainer_waits
--     before it sleeps (and outbox.drainer_woke when a NOTIFY woke it). NOTIFY takes a cluster-wide
--     lock from commit until the commit's WAL flush is done, so concurrent producers that notify
--     commit one at a time; while the drainers are busy nobody needs one. The Go drainer does this
--     by itself; another client that only LISTENs is then woken only by its own polling.
-- Owner only, like create_queue (it replaces the queue's NOTIFY trigger). Idempotent; kept when
-- create_queue runs again.
CREATE OR REPLACE FUNCTION outbox.set_notify(queue text, notify text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  IF notify IS NULL OR notify NOT IN ('always', 'when_waiting') THEN
    RAISE EXCEPTION 'set_notify: notify must be ''always'' or ''when_waiting'', got %',
      COALESCE(pg_catalog.quote_literal(notify), 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('set_notify', queue);
  UPDATE outbox.queues q SET notify = set_notify.notify WHERE q.queue_id = v_q.queue_id
  RETURNING q.* INTO v_q;
  PERFORM outbox._install_notify_trigger(v_q);
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
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
-- Heads are not locked there (a lock on a version newer than the snapshot fails with 40001 too,
-- and claims move heads all the time): every key with a head gets a wake note.
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
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  v_keys := p_keys;
  v_mins := p_mins;
  v_maxs := p_maxs;
  IF NOT p_locked THEN
    v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
    WITH noted AS (
      SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi, pg_catalog.hashtext(u.k) & 65535 AS slot
      FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
      GROUP BY u.k),
    locked AS (
      INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
      SELECT p_q.queue_id, n.slot, GREATEST(p_q.clock_base, LEAST(pg_catalog.max(n.hi), v_issued)), p_q.clock_base
      FROM noted n GROUP BY n.slot ORDER BY n.slot
      ON CONFLICT (queue_id, slot) DO UPDATE
        SET previous_max = c.committed_max,
            committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max))
    SELECT pg_catalog.array_agg(n.k ORDER BY n.k), pg_catalog.array_agg(n.lo ORDER BY n.k),
           pg_catalog.array_agg(n.hi ORDER BY n.k)
      INTO v_keys, v_mins, v_maxs
    FROM noted n;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of its clock as we found it and of its head (LATERAL: index probes whatever
  -- the statistics of these small tables say). Late keys are renumbered, then probed again.
  LOOP
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
    CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                    WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                     WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                      THEN 'new'
                                    ELSE 'contended' END AS state) s;
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
  channel text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'create_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_schema text := pg_catalog.split_part(v_name, '.', 1);
  v_table text := pg_catalog.split_part(v_name, '.', 2);
  v_col text := pg_catalog.lower(partition_column);
  v_channel text := COALESCE(channel, 'pgdrain_' || v_schema || '_' || v_table);
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
               'sent_at', 'leased_until', 'lease_token', 'last_error') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_max IS NULL OR backoff_max < backoff_min OR backoff_max > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_max must be between backoff_min (%s) and 1 day, got %s',
      backoff_min, COALESCE(backoff_max::text, 'NULL')));
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
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row.
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s
         ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
         ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
         ADD COLUMN IF NOT EXISTS sent_at timestamptz,
         ADD COLUMN IF NOT EXISTS leased_until timestamptz,
         ADD COLUMN IF NOT EXISTS lease_token uuid,
         ADD COLUMN IF NOT EXISTS last_error text,
         ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order.
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
        INTO STRICT v_has_nulls;
      IF v_has_nulls THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
      END IF;
      EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
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
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0))
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence,
        clock_base = CASE WHEN q.table_oid = EXCLUDED.table_oid THEN q.clock_base ELSE EXCLUDED.clock_base END
  RETURNING q.queue_id INTO v_queue_id;

  -- The two required indexes, unless an equivalent one (any name) is already there.
  IF v_col IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'partition') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (%I, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_claim', v_rel);
  END IF;

  -- CHECKs, the producers' column privileges (plain INSERT of an event, RETURNING id; the heads
  -- trigger runs as owner) and the TRUNCATE trigger.
  PERFORM outbox._guard_queue_table(v_rel, v_col, NOT v_created);

  -- The NOTIFY trigger wakes drainers of an unpartitioned queue; a partitioned queue's rows become
  -- claimable at commit, where its commit step notifies (outbox._commit_keys). Both as
  -- outbox.set_notify last said (a registration keeps it).
  PERFORM outbox._install_notify_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    -- A larger max_attempts makes rows that were poisoned deliverable again, possibly below their
    -- partitions' floors or in partitions without a head: they are searched from scratch too.
    IF v_new_table OR create_queue.max_attempts > v_old.max_attempts THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark,
-- clocks, claim hints, statements with kept plans and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_q outbox.queues;
  v_rel regclass;
  v_fn regprocedure;
BEGIN
  -- Not outbox._queue: that refuses a registration whose table is gone, which is what this clears.
  SELECT * INTO v_q FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', fn, v_name
      USING ERRCODE = '42P01';
  END IF;
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  IF pg_catalog.pg_table_is_visible(v_q.table_oid) IS NOT NULL THEN
    v_rel := v_q.table_oid::regclass;
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF v_rel IS NULL THEN
    NULL;
  ELSIF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_rel);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
  -- Its drainers' waiting mark (outbox._install_notify_trigger).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'drainer_waits_q' || v_q.queue_id);
  -- Its statements with kept plans (outbox._prepared).
  FOR v_fn IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || v_q.queue_id || '\_%'
  LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_fn);
  END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of an unpartitioned queue: one NOTIFY per statement
-- (PostgreSQL folds identical notifications of one transaction into one), never one per row. A
-- partitioned queue has none: its rows become claimable at commit, and its commit step
-- (outbox._commit_keys) notifies only when it made or woke a partition head; rows behind an
-- existing head are claimed when the drainer that finishes the head claims again. NOTIFY takes a
-- cluster-wide lock at commit, held through the commit's WAL flush, so concurrent producers that
-- notify commit one at a time: a queue that notifies 'when_waiting' (outbox.set_notify) skips it
-- unless a drainer waits for one (the check of outbox._drainer_waits, inlined: no lookup, its
-- arguments name the queue and sequence).
-- Arguments: channel, queue name (the payload); for 'when_waiting' also the queue_id and the oid
-- of its drainer_waits_q<queue_id> sequence.
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
AS $$
BEGIN
  IF TG_NARGS > 2 THEN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + TG_ARGV[2]::integer, -4);
    IF COALESCE(pg_catalog.pg_sequence_last_value(TG_ARGV[3]::oid), 0)
       <= (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint THEN
      RETURN NULL;
    END IF;
  END IF;
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Every registered queue gets the sequence in which its drainers say they wait (and unpartitioned
-- ones their NOTIFY trigger again, unchanged: every queue notifies 'always' until set_notify).
SELECT outbox._install_notify_trigger(q)
FROM outbox.queues q
WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
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
-- Back to 00019: producers always notify.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT c.oid::regclass AS seq FROM pg_catalog.pg_class c
           WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'S'
             AND c.relname LIKE 'drainer\_waits\_q%' LOOP
    EXECUTE pg_catalog.format('DROP SEQUENCE %s', r.seq);
  END LOOP;
END;
$$;
DROP FUNCTION outbox.set_notify(text, text);
DROP FUNCTION outbox.drainer_waits(text, interval);
DROP FUNCTION outbox.drainer_woke(text, bigint);
DROP FUNCTION outbox._drainer_waits(outbox.queues);
DROP FUNCTION outbox._install_notify_trigger(outbox.queues);
ALTER TABLE outbox.queues DROP COLUMN notify;
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
--    NOTIFY when a partition became claimable.
-- Returns whether it wrote a head or a wake note (and notified).
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
-- Heads are not locked there (a lock on a version newer than the snapshot fails with 40001 too,
-- and claims move heads all the time): every key with a head gets a wake note.
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
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  v_keys := p_keys;
  v_mins := p_mins;
  v_maxs := p_maxs;
  IF NOT p_locked THEN
    v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
    WITH noted AS (
      SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi, pg_catalog.hashtext(u.k) & 65535 AS slot
      FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
      GROUP BY u.k),
    locked AS (
      INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
      SELECT p_q.queue_id, n.slot, GREATEST(p_q.clock_base, LEAST(pg_catalog.max(n.hi), v_issued)), p_q.clock_base
      FROM noted n GROUP BY n.slot ORDER BY n.slot
      ON CONFLICT (queue_id, slot) DO UPDATE
        SET previous_max = c.committed_max,
            committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max))
    SELECT pg_catalog.array_agg(n.k ORDER BY n.k), pg_catalog.array_agg(n.lo ORDER BY n.k),
           pg_catalog.array_agg(n.hi ORDER BY n.k)
      INTO v_keys, v_mins, v_maxs
    FROM noted n;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of its clock as we found it and of its head (LATERAL: index probes whatever
  -- the statistics of these small tables say). Late keys are renumbered, then probed again.
  LOOP
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
    CROSS JOIN LATERAL (SELECT CASE WHEN h.held THEN CASE WHEN h.head_id IS NULL OR h.floor_id > u.lo THEN 'fix' END
                                    WHEN NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                                     WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
                                      THEN 'new'
                                    ELSE 'contended' END AS state) s;
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
    -- floor is 0 until a claim raises it.
    WITH made AS (
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo,
             CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
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
  IF v_wrote THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN v_wrote;
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
  channel text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'create_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_schema text := pg_catalog.split_part(v_name, '.', 1);
  v_table text := pg_catalog.split_part(v_name, '.', 2);
  v_col text := pg_catalog.lower(partition_column);
  v_channel text := COALESCE(channel, 'pgdrain_' || v_schema || '_' || v_table);
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
               'sent_at', 'leased_until', 'lease_token', 'last_error') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_max IS NULL OR backoff_max < backoff_min OR backoff_max > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_max must be between backoff_min (%s) and 1 day, got %s',
      backoff_min, COALESCE(backoff_max::text, 'NULL')));
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
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row.
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s
         ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
         ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
         ADD COLUMN IF NOT EXISTS sent_at timestamptz,
         ADD COLUMN IF NOT EXISTS leased_until timestamptz,
         ADD COLUMN IF NOT EXISTS lease_token uuid,
         ADD COLUMN IF NOT EXISTS last_error text,
         ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order.
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
        INTO STRICT v_has_nulls;
      IF v_has_nulls THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
      END IF;
      EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
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
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0))
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence,
        clock_base = CASE WHEN q.table_oid = EXCLUDED.table_oid THEN q.clock_base ELSE EXCLUDED.clock_base END
  RETURNING q.queue_id INTO v_queue_id;

  -- The two required indexes, unless an equivalent one (any name) is already there.
  IF v_col IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'partition') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (%I, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_claim', v_rel);
  END IF;

  -- CHECKs, the producers' column privileges (plain INSERT of an event, RETURNING id; the heads
  -- trigger runs as owner) and the TRUNCATE trigger.
  PERFORM outbox._guard_queue_table(v_rel, v_col, NOT v_created);

  -- The NOTIFY trigger wakes drainers of an unpartitioned queue; a partitioned queue's rows become
  -- claimable at commit, where its commit step notifies (outbox._commit_partitions).
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
  IF v_col IS NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, v_channel, v_name);
  END IF;
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    -- A larger max_attempts makes rows that were poisoned deliverable again, possibly below their
    -- partitions' floors or in partitions without a head: they are searched from scratch too.
    IF v_new_table OR create_queue.max_attempts > v_old.max_attempts THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark,
-- clocks, claim hints, statements with kept plans and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_q outbox.queues;
  v_rel regclass;
  v_fn regprocedure;
BEGIN
  -- Not outbox._queue: that refuses a registration whose table is gone, which is what this clears.
  SELECT * INTO v_q FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', fn, v_name
      USING ERRCODE = '42P01';
  END IF;
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  IF pg_catalog.pg_table_is_visible(v_q.table_oid) IS NOT NULL THEN
    v_rel := v_q.table_oid::regclass;
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF v_rel IS NULL THEN
    NULL;
  ELSIF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_rel);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
  -- Its statements with kept plans (outbox._prepared).
  FOR v_fn IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE '\_q' || v_q.queue_id || '\_%'
  LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_fn);
  END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of an unpartitioned queue: one NOTIFY per statement
-- (PostgreSQL folds identical notifications of one transaction into one), never one per row. A
-- partitioned queue has none: its rows become claimable at commit, and its commit step
-- (outbox._commit_partitions) notifies only when it made or woke a partition head; rows behind an
-- existing head are claimed when the drainer that finishes the head claims again. NOTIFY takes a
-- cluster-wide lock at commit, so skipping it is what keeps many concurrent producers of busy keys
-- from queueing behind each other.
-- Arguments: channel, queue name (the payload).
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
AS $$
BEGIN
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unpartitioned queues get 00019's NOTIFY trigger back (two arguments: channel, queue).
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT q.table_oid::regclass AS rel, q.channel, q.queue FROM outbox.queues q
           WHERE q.partition_column IS NULL
             AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
           ORDER BY q.queue_id LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', r.rel);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', r.rel, r.channel, r.queue);
  END LOOP;
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

