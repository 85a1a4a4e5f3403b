-- Classifies every index of a queue table that covers pending rows (predicate sent_at IS NULL):
-- 'partition' = (<partition column>, id), 'claim' = (attempt_count, id), anything else 'decoy'.
-- check_indexes and create_queue both read this, so they never disagree.
CREATE OR REPLACE FUNCTION outbox._queue_indexes(p_table regclass, p_partition_column text)
RETURNS TABLE(index_name text, role text, definition text, valid boolean)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT c.relname::text,
         CASE
           WHEN cols = ARRAY[p_partition_column, 'id'] THEN 'partition'
           WHEN cols = ARRAY['attempt_count', 'id'] THEN 'claim'
           ELSE 'decoy'
         END,
         pg_catalog.pg_get_indexdef(i.indexrelid),
         i.indisvalid AND i.indisready
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
  CROSS JOIN LATERAL (
    SELECT pg_catalog.array_agg(
             CASE WHEN k.attnum = 0 THEN '(expression)' ELSE a.attname::text END ORDER BY k.ord) AS cols
    FROM pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
    LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
  ) kc
  WHERE i.indrelid = p_table
    AND i.indpred IS NOT NULL
    AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) ~ E'\\msent_at IS NULL\\M'
    AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) !~ E'\\mOR\\M';
$$;
