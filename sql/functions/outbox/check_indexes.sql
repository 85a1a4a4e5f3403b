-- Empty when the queue's indexes over pending rows are exactly the required ones. Otherwise one row
-- per problem: 'missing' (a required index), 'decoy' (any other index over sent_at IS NULL: the
-- plan the planner picks when statistics are stale and the queue is deep), 'invalid' (a failed
-- concurrent build).
CREATE OR REPLACE FUNCTION outbox.check_indexes(queue text)
RETURNS TABLE(problem text, index_name text, detail text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('check_indexes', queue);
  v_table regclass := v_q.table_oid::regclass;
BEGIN
  RETURN QUERY
  SELECT 'missing', NULL::text, pg_catalog.format('CREATE INDEX ON %s (%s) WHERE sent_at IS NULL', v_table, r.cols)
  -- quote_ident, not format('%I'): an unpartitioned queue has no partition column (NULL).
  FROM (VALUES ('partition', pg_catalog.quote_ident(v_q.partition_column) || ', id'),
               ('claim', 'attempt_count, id')) AS r(role, cols)
  WHERE (r.role = 'claim' OR v_q.partition_column IS NOT NULL)
    AND NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_table, v_q.partition_column) x
                    WHERE x.role = r.role AND x.valid)
  UNION ALL
  SELECT 'decoy', x.index_name, x.definition
  FROM outbox._queue_indexes(v_table, v_q.partition_column) x
  WHERE x.role = 'decoy' OR (x.role = 'partition' AND v_q.partition_column IS NULL)
  UNION ALL
  SELECT 'invalid', x.index_name, x.definition
  FROM outbox._queue_indexes(v_table, v_q.partition_column) x
  WHERE NOT x.valid;
END;
$$;
