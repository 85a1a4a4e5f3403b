-- The columns of queue table p_rel that pgdrain itself writes (create_queue adds them when they are
-- missing) but whose types are not the ones its statements are built for, as "column type (needs
-- type)" separated by commas; NULL when there are none. A claim's RETURN QUERY requires its
-- columns' exact types (attempt_count bigint: every claim failed with 42804), and a narrower
-- last_error (varchar(3)) refused every failure recorded: the row was delivered again and again,
-- never poisoned, and apply_results refused the whole batch's results with it. The same list as
-- pgdrain check's columns check.
CREATE OR REPLACE FUNCTION outbox._column_type_problems(p_rel regclass)
RETURNS text
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.string_agg(pg_catalog.format('%s %s (needs %s)', a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), r.typ),
                               ', ' ORDER BY r.n)
  FROM (VALUES (1, 'attempt_count', 'integer'), (2, 'next_attempt_at', 'timestamp with time zone'),
               (3, 'sent_at', 'timestamp with time zone'), (4, 'leased_until', 'timestamp with time zone'),
               (5, 'lease_token', 'uuid'), (6, 'last_error', 'text'), (7, 'headers', 'jsonb')) AS r(n, col, typ)
  JOIN pg_catalog.pg_attribute a ON a.attrelid = p_rel AND a.attname = r.col AND NOT a.attisdropped
  WHERE pg_catalog.format_type(a.atttypid, a.atttypmod) <> r.typ
$$;
