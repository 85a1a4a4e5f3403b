-- Whether trigger p_name of table p_rel is in place as pgdrain makes it: enabled, of type p_type
-- (pg_trigger.tgtype: 4 AFTER INSERT, 6 BEFORE INSERT, 32 AFTER TRUNCATE, each FOR EACH STATEMENT;
-- 17 AFTER UPDATE FOR EACH ROW),
-- firing p_function with exactly p_args, with a WHEN condition or not (p_when), and the transition
-- table p_new_table. create_queue run again leaves such a trigger as it is: dropping and making it
-- again takes the table's ACCESS EXCLUSIVE lock, which waits for every open lock-mode batch while
-- every producer and claim of the queue waits behind it.
CREATE OR REPLACE FUNCTION outbox._trigger_in_place(p_rel regclass, p_name text, p_function regprocedure,
                                                    p_type integer, p_args text[], p_when boolean DEFAULT false,
                                                    p_new_table text DEFAULT NULL)
RETURNS boolean
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_trigger t
    WHERE t.tgrelid = p_rel AND t.tgname = p_name AND NOT t.tgisinternal AND t.tgenabled = 'O'
      AND t.tgfoid = p_function AND t.tgtype = p_type AND t.tgnargs = pg_catalog.cardinality(p_args)
      AND t.tgargs = COALESCE(
            (SELECT pg_catalog.string_agg(pg_catalog.convert_to(u.a, pg_catalog.getdatabaseencoding()) || E'\\x00'::bytea,
                                          ''::bytea ORDER BY u.n)
             FROM pg_catalog.unnest(p_args) WITH ORDINALITY AS u(a, n)), ''::bytea)
      AND (t.tgqual IS NOT NULL) = p_when
      AND t.tgnewtable IS NOT DISTINCT FROM p_new_table::name);
$$;
