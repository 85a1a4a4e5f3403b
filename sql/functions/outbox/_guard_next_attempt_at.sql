-- The queue table's CHECK pgdrain_next_attempt_at_within_max_delay: next_attempt_at at most the
-- queue's max_delay after the clock when a row is written, so that a plain INSERT (by a role
-- granted next_attempt_at) can not park a key for ever either; the functions check the same bound
-- first, naming their argument (outbox._check_delay). The bound is read from the clock when the row
-- is written, so a row that met it still meets it later: an UPDATE of it never fails for it, nor
-- does a restore (pg_restore loads the rows after the time they were written). Made again when
-- max_delay changes (p_replace), NOT VALID unless the table is new (p_validate): rows written under
-- a larger limit keep their time (and nothing updates a parked row without writing a new one).
-- Backoffs stay within it: create_queue requires max_delay >= backoff_max.
CREATE OR REPLACE FUNCTION outbox._guard_next_attempt_at(p_rel regclass, p_max_delay interval, p_replace boolean,
                                                         p_validate boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_name constant text := 'pgdrain_next_attempt_at_within_max_delay';
BEGIN
  IF p_replace THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I', p_rel, v_name);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conrelid = p_rel AND k.conname = v_name) THEN
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s ADD CONSTRAINT %I CHECK (next_attempt_at IS NULL OR next_attempt_at <= pg_catalog.clock_timestamp() + %L::interval)%s',
      p_rel, v_name, p_max_delay, CASE WHEN p_validate THEN '' ELSE ' NOT VALID' END);
  END IF;
END;
$$;
