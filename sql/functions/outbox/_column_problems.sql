-- The columns of queue table p_rel that pgdrain itself writes (create_queue adds them when they are
-- missing) as they must not be, each as "column what (needs what)", separated by commas; NULL when
-- there are none.
-- - A type other than the one its statements are built for: a claim's RETURN QUERY requires its
--   columns' exact types (attempt_count bigint: every claim failed with 42804), and a narrower
--   last_error (varchar(3)) refused every failure recorded: the row was delivered again and again,
--   never poisoned, and apply_results refused the whole batch's results with it.
-- - A default that makes a new row other than pending and free: sent_at's wrote every row as sent
--   (never delivered, counted nowhere), leased_until's or lease_token's as leased by nobody, and an
--   attempt_count that is not NOT NULL DEFAULT 0 as already tried (poisoned at max_attempts) or
--   NULL (no claim, stats or repair ever counts such a row).
-- The same types as pgdrain check's columns check.
CREATE OR REPLACE FUNCTION outbox._column_problems(p_rel regclass)
RETURNS text
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.string_agg(p.problem, ', ' ORDER BY p.n, p.kind)
  FROM (VALUES (1, 'attempt_count', 'integer'), (2, 'next_attempt_at', 'timestamp with time zone'),
               (3, 'sent_at', 'timestamp with time zone'), (4, 'leased_until', 'timestamp with time zone'),
               (5, 'lease_token', 'uuid'), (6, 'last_error', 'text'), (7, 'headers', 'jsonb')) AS r(n, col, typ)
  JOIN pg_catalog.pg_attribute a ON a.attrelid = p_rel AND a.attname = r.col AND NOT a.attisdropped
  LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  CROSS JOIN LATERAL (
    SELECT r.n, 1 AS kind, pg_catalog.format('%s %s (needs %s)', r.col, pg_catalog.format_type(a.atttypid, a.atttypmod), r.typ)
    WHERE pg_catalog.format_type(a.atttypid, a.atttypmod) <> r.typ
    UNION ALL
    SELECT r.n, 2, pg_catalog.format('%s DEFAULT %s (needs none: new rows would be written %s)', r.col,
                                     pg_catalog.pg_get_expr(d.adbin, d.adrelid),
                                     CASE r.col WHEN 'sent_at' THEN 'as sent, never delivered' ELSE 'as leased' END)
    WHERE r.col IN ('sent_at', 'leased_until', 'lease_token') AND d.adbin IS NOT NULL
    UNION ALL
    SELECT r.n, 2, pg_catalog.format('attempt_count %s%s (needs NOT NULL DEFAULT 0: %s)',
                                     CASE WHEN a.attnotnull THEN 'NOT NULL ' ELSE '' END,
                                     COALESCE('DEFAULT ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), 'without a default'),
                                     CASE WHEN NOT a.attnotnull THEN 'a row written with NULL attempts is taken by no claim'
                                          WHEN d.adbin IS NULL THEN 'enqueue and every producer that leaves it out fail'
                                          ELSE 'new rows would be written as tried already' END)
    WHERE r.col = 'attempt_count'
      AND NOT (a.attnotnull AND d.adbin IS NOT NULL AND pg_catalog.pg_get_expr(d.adbin, d.adrelid) = '0')) AS p(n, kind, problem)
$$;
