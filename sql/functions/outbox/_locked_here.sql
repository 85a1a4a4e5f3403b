-- Returns the first of p_ids whose row this transaction does not hold FOR UPDATE, NULL when it holds
-- them all. Ownership comes from the row lock, never from a setting the caller could write.
-- Fast path: xmax is this transaction's own top-level xid (claimed at the top level). Otherwise
-- (claimed in a savepoint: xmax is the subtransaction's xid, or a MultiXact when the transaction
-- also holds a weaker lock on the row or rolled back an update of it) the rows are locked again,
-- FOR UPDATE SKIP LOCKED: a row another transaction holds is skipped; a row this transaction already
-- holds (top level, live or released savepoint) comes back and its xmax stays as it was; a row
-- nobody holds (never locked, its savepoint rolled back, or its holder ended between the two reads)
-- is locked now and gets a new xmax. So a row is ours when it comes back with the xmax it had
-- before. A lock taken here for a row that is not ours ends with the error the caller then raises.
-- Never waits; under REPEATABLE READ a row updated since the snapshot fails with 40001.
CREATE OR REPLACE FUNCTION outbox._locked_here(p_q outbox.queues, p_ids bigint[])
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_table constant regclass := p_q.table_oid::regclass;
  v_all_mine boolean;
  v_before text[];
  v_locked bigint[];
  v_foreign bigint;
BEGIN
  -- The fast path with its plan kept (outbox._prepared; planned on every call it cost 3-4x).
  -- p_ids are distinct (outbox._check_outcomes), so every row is ours when as many rows as ids
  -- have our xid as xmax.
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'SELECT pg_catalog.count(*) = pg_catalog.cardinality($1) FROM %s t WHERE t.id = ANY ($1) AND t.xmax = $2',
    v_table), 'bigint[], xid', 'TABLE(pgdrain_all_mine boolean)')
    INTO v_all_mine USING p_ids, pg_catalog.pg_current_xact_id_if_assigned()::xid;
  IF v_all_mine THEN
    RETURN NULL;
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.xmax::text ORDER BY u.ord)
     FROM pg_catalog.unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord) LEFT JOIN %s t ON t.id = u.id', v_table)
    INTO v_before USING p_ids;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id) FROM (SELECT s.id FROM %s s WHERE s.id = ANY ($1) FOR UPDATE SKIP LOCKED) t',
    v_table)
    INTO v_locked USING p_ids;
  -- A new statement reads the row headers as they are now (xmax is not versioned by the snapshot;
  -- the locking statement itself returns the values it read before locking).
  EXECUTE pg_catalog.format(
    'SELECT u.id FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS u(id, xmax_before, ord)
     LEFT JOIN %s t ON t.id = u.id
     WHERE u.id <> ALL ($3) OR t.xmax IS NULL OR t.xmax::text IS DISTINCT FROM u.xmax_before
     ORDER BY u.ord LIMIT 1', v_table)
    INTO v_foreign USING p_ids, v_before, COALESCE(v_locked, '{}');
  RETURN v_foreign;
END;
$$;
