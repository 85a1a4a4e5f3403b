-- The common core of the operators' row actions (poison_row, retry_row, dismiss_poisoned): one
-- statement that takes the rows still in the state the operator saw, changes them, and logs each
-- in outbox.operator_actions (with the session's login role, the reason and the attempt count it had); then the partitions'
-- heads follow (outbox._refresh_heads) and an idle drainer is woken when a row became claimable.
-- Fenced: a row that moved on (sent, requeued to a new id, another attempt recorded, poisoned or
-- not as the action needs) is not taken, nor one a worker delivers right now (a live lease, or a
-- lock-mode claim's row lock: SKIP LOCKED, never waiting). An expired lease's token is cleared with
-- the change, so that worker's late result is refused like any other after its lease ran out (so is
-- one ending more than a day ahead, which a clock since set back wrote: see outbox._claim).
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
         AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.clock_timestamp()
              OR t.leased_until > pg_catalog.clock_timestamp() + interval ''1 day'')
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
