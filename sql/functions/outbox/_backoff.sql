-- Exponential backoff with equal jitter: the n-th retry waits between half and all of
-- min * 2^(n-1), capped at max, and never less than min.
CREATE OR REPLACE FUNCTION outbox._backoff(p_attempt integer, p_min interval, p_max interval)
RETURNS interval
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT GREATEST(p_min, d / 2 + d / 2 * pg_catalog.random())
  FROM (SELECT LEAST(p_max, p_min * pg_catalog.power(2, LEAST(GREATEST(p_attempt, 1) - 1, 30))) AS d) s;
$$;
