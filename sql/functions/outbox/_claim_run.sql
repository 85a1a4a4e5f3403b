-- The rest of each claimed head's run (outbox._claim with p_run > 1): the rows that follow head
-- p_heads[i] in partition p_keys[i], in id order, up to p_more per partition and p_budget in all,
-- leased with p_until and fresh tokens (lease mode) or locked (lock mode). A run is unbroken: it
-- stops before the first pending row that is not due, is leased, or is locked by another session
-- (a poisoned row is no part of the order and is stepped over, as the FIFO rule does), so the
-- rows it returns are exactly the next ones their partition delivers. The caller holds each
-- head's row (leased or locked, with its partition head locked), so no other claim can reach
-- these rows meanwhile: they are not heads. A lease ending more than a day after the clock counts
-- as over (written by a clock since set back, see outbox._claim).
-- Never waits: rows are locked SKIP LOCKED (a session holding one of them, say an operator's
-- open transaction, must not stall every claim), and a row skipped or changed since the search
-- ends its run there: what was leased past it is given back at once, what was locked past it is
-- not returned (the caller's COMMIT unlocks it untouched).
CREATE OR REPLACE FUNCTION outbox._claim_run(p_q outbox.queues, p_heads bigint[], p_keys text[], p_more integer,
                                             p_budget integer, p_now timestamptz, p_until timestamptz, p_mode text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table constant regclass := p_q.table_oid::regclass;
  v_deliverable constant text := 'u.sent_at IS NULL AND u.attempt_count < $3
    AND (u.next_attempt_at IS NULL OR u.next_attempt_at <= $4)
    AND (u.leased_until IS NULL OR u.leased_until <= $4 OR u.leased_until > $4 + interval ''1 day'')';
  v_planned bigint[];
  v_ords bigint[];
  v_taken bigint[];
  v_kept bigint[];
  v_dropped bigint[];
BEGIN
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH c AS (
       SELECT c.head, c.key, c.ord FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS c(head, key, ord)),
     run AS (
       SELECT r.id, r.ord FROM (
         SELECT n.id, c.ord,
                pg_catalog.bool_and(n.due) OVER (PARTITION BY c.ord ORDER BY n.id) AS unbroken
         FROM c CROSS JOIN LATERAL (
           SELECT t.id, (t.next_attempt_at IS NULL OR t.next_attempt_at <= $4)
                        AND (t.leased_until IS NULL OR t.leased_until <= $4 OR t.leased_until > $4 + interval ''1 day'') AS due
           FROM %1$s t
           WHERE t.%2$I = c.key::%3$s AND t.id > c.head AND t.sent_at IS NULL AND t.attempt_count < $3
           ORDER BY t.id LIMIT $5) n) r
       WHERE r.unbroken
       ORDER BY r.ord, r.id
       LIMIT $6),
     taken AS (
       SELECT u.id FROM %1$s u
       WHERE u.id = ANY (ARRAY(SELECT run.id FROM run)) AND %4$s
       FOR UPDATE OF u SKIP LOCKED),
     done AS (%5$s)
     SELECT (SELECT pg_catalog.array_agg(run.id ORDER BY run.ord, run.id) FROM run),
            (SELECT pg_catalog.array_agg(run.ord ORDER BY run.ord, run.id) FROM run),
            (SELECT pg_catalog.array_agg(done.id) FROM done)',
    v_table, p_q.partition_column, p_q.partition_type, v_deliverable,
    CASE WHEN p_mode = 'lease'
         THEN pg_catalog.format(
           'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $7
            FROM taken WHERE u.id = taken.id RETURNING u.id', v_table)
         ELSE 'SELECT taken.id FROM taken' END),
    'bigint[], text[], integer, timestamptz, integer, integer, timestamptz',
    'TABLE(pgdrain_planned bigint[], pgdrain_ords bigint[], pgdrain_taken bigint[])')
    INTO v_planned, v_ords, v_taken
    USING p_heads, p_keys, p_q.max_attempts, p_now, p_more, p_budget, p_until;

  IF v_planned IS NULL THEN
    RETURN '{}';
  END IF;
  IF pg_catalog.cardinality(v_planned) = COALESCE(pg_catalog.cardinality(v_taken), 0) THEN
    RETURN v_planned;
  END IF;
  -- A row of a run was skipped: its run ends before it.
  SELECT pg_catalog.array_agg(x.id ORDER BY x.ord, x.id) FILTER (WHERE NOT x.broken),
         pg_catalog.array_agg(x.id) FILTER (WHERE x.broken AND x.id = ANY (COALESCE(v_taken, '{}')))
    INTO v_kept, v_dropped
  FROM (SELECT p.id, p.ord,
               pg_catalog.bool_or(p.id <> ALL (COALESCE(v_taken, '{}')))
                 OVER (PARTITION BY p.ord ORDER BY p.id) AS broken
        FROM unnest(v_planned, v_ords) AS p(id, ord)) x;
  IF v_dropped IS NOT NULL AND p_mode = 'lease' THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s u SET lease_token = NULL, leased_until = NULL WHERE u.id = ANY ($1)', v_table)
      USING v_dropped;
  END IF;
  RETURN COALESCE(v_kept, '{}');
END;
$$;
