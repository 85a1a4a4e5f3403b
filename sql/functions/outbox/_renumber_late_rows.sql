-- Gives this transaction's pending rows of the late keys new ids from the queue's id sequence, in
-- their order, each larger than the key's clock (the largest committed id of its hash): delivered
-- order (id order) is then commit order (see outbox.tg_queue__commit). A sequence with CACHE > 1
-- hands this session values from its own cache, which may lie below ids other sessions already
-- committed: values not above the clock are drawn and dropped until one is (at most the cache
-- size; the clock never exceeds the sequence's last value, see the caller).
-- Skipped (the key keeps id order) only when the sequence is behind the clock, which means it was
-- set back by hand (setval, ALTER SEQUENCE RESTART): a new id must not collide with a later default.
-- One statement renumbers every late row, so a bulk transaction costs a few statements, not one
-- per row.
-- Arguments: the queue's id sequence (NULL: none), every key the transaction wrote and for each
-- (aligned arrays) its smallest and largest id and, when the key is late, its clock as the caller
-- read it (NULL: not late). Returns every key with its smallest and largest id after renumbering.
CREATE OR REPLACE FUNCTION outbox._renumber_late_rows(p_q outbox.queues, p_sequence regclass, p_keys text[],
                                                      p_los bigint[], p_his bigint[], p_clocks bigint[])
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_last bigint;
  v_ids bigint[];
  v_clock bigint;
  v_first bigint;
  v_moved text;
BEGIN
  v_last := COALESCE(pg_catalog.pg_sequence_last_value(p_sequence), 0);
  SELECT pg_catalog.max(u.clock) INTO v_clock
  FROM unnest(p_clocks) AS u(clock) WHERE u.clock <= v_last;
  IF p_sequence IS NOT NULL AND v_clock IS NOT NULL THEN
    -- This transaction's rows of every late key, in id order: one index range per key (LATERAL,
    -- kept as such by OFFSET 0, whatever the statistics of a table just filled say). Rows of the top transaction are known
    -- by their xmin; only others (a savepoint's, another producer's) need outbox._written_here.
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(x.id ORDER BY x.id)
       FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(k, lo, hi, clock)
       CROSS JOIN LATERAL (
         SELECT t.id FROM %s t
         WHERE t.%I = u.k::%s AND t.id BETWEEN u.lo AND u.hi AND t.sent_at IS NULL
           AND (t.xmin = $6 OR outbox._written_here(t.xmin))
         OFFSET 0) x
       WHERE u.clock <= $5',
      p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type)
      INTO v_ids USING p_keys, p_los, p_his, p_clocks, v_last,
        (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
  IF v_ids IS NULL THEN
    RETURN QUERY SELECT * FROM unnest(p_keys, p_los, p_his);
    RETURN;
  END IF;

  v_first := pg_catalog.nextval(p_sequence);
  WHILE v_first <= v_clock LOOP
    v_first := pg_catalog.nextval(p_sequence);
  END LOOP;
  -- New ids in the rows' order, each above every late key's clock: drawn from the sequence (the
  -- CTE is not inlined, nextval being volatile, and yields in ordinality order), or, for an id
  -- GENERATED ALWAYS, which takes only DEFAULT, by the identity one row after the other
  -- (outbox._ids_by_default), after the value above (dropped).
  IF outbox._id_generated_always(p_q.table_oid) THEN
    v_ids := outbox._ids_by_default(p_q.table_oid, v_ids);
    v_moved := 'moved AS (SELECT t.%2$I::text AS k, t.id FROM %1$s t WHERE t.id = ANY ($1))';
  ELSE
    v_moved := 'fresh AS (
       SELECT o.id AS old_id, CASE WHEN o.n = 1 THEN $2 ELSE pg_catalog.nextval($3) END AS new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(id, n)
       ORDER BY o.n),
     moved AS (
       UPDATE %1$s t SET id = f.new_id FROM fresh f WHERE t.id = f.old_id
       RETURNING t.%2$I::text AS k, t.id)';
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'WITH ' || v_moved || ',
     -- Every key with its range: that of its moved rows if any, else the one it came with.
     spans AS (
       SELECT m.k, m.id AS lo, m.id AS hi, true AS moved FROM moved m
       UNION ALL
       SELECT u.k, u.lo, u.hi, false FROM unnest($4::text[], $5::bigint[], $6::bigint[]) AS u(k, lo, hi))
     SELECT b.k, COALESCE(pg_catalog.min(b.lo) FILTER (WHERE b.moved), pg_catalog.min(b.lo)),
            COALESCE(pg_catalog.max(b.hi) FILTER (WHERE b.moved), pg_catalog.max(b.hi))
     FROM spans b GROUP BY b.k',
    p_q.table_oid::regclass, p_q.partition_column)
    USING v_ids, v_first, p_sequence, p_keys, p_los, p_his;
END;
$$;
