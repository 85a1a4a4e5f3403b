-- An interval argument must not mix signs across its parts (months, days, time): PostgreSQL
-- compares intervals counting a month as 30 days and a day as 24 hours, but adds them to a time by
-- the calendar, so '-12000 mons 360001 days' passes "greater than 0 and at most 1 day" and still
-- ends 14 years in the past: a step's lease already over when it is taken (the next take hands the
-- step out again: two deliveries), a delay that means another span than the bound checked. As
-- outbox._check_span (the modules are installed apart). With its parts of
-- one sign, an interval's effect differs from its comparison by a month's or a day's length at
-- most, never in sign. NULL passes (other checks decide about NULL).
CREATE OR REPLACE FUNCTION alr._check_span(p_function text, p_argument text, p_value interval)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_months constant numeric := pg_catalog.extract('year', p_value) * 12 + pg_catalog.extract('month', p_value);
  v_days constant numeric := pg_catalog.extract('day', p_value);
  v_time constant interval := p_value - pg_catalog.make_interval(
    months => v_months::integer, days => v_days::integer);
BEGIN
  IF (v_months > 0 OR v_days > 0 OR v_time > interval '0')
     AND (v_months < 0 OR v_days < 0 OR v_time < interval '0') THEN
    PERFORM alr._invalid(p_function, pg_catalog.format(
      '%s must not mix signs across its months, days and time (a month or a day has no fixed length), got %s',
      p_argument, p_value));
  END IF;
END;
$$;
