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
