-- Why a partition column can not key partitions, or NULL when it can. pgdrain keys a partition by
-- the column's value as text, made by whichever session writes (the heads, the commit locks of
-- hashtext(key), the lateness of a key, the wake notes) and cast back to the column's type where it
-- reads the queue table. That is one key per value only when equal values have one text, the same
-- in every session: text, varchar and char under a deterministic collation, smallint, integer,
-- bigint, uuid, and domains over them. Others split a key or strand its rows (a helper's review):
-- numeric 1.0 and 1.00, float8 0 and -0, interval '1 day' and '24 hours', jsonb, arrays of them
-- and a case-insensitive collation have equal values of different texts (two heads, two rows of
-- one key delivered together, commit order not kept between them); timestamptz, date, timestamp,
-- interval, bytea and money have texts that depend on the writer's TimeZone, DateStyle,
-- IntervalStyle, bytea_output or lc_monetary (the same), and some do not read back as the value
-- (rows without a head; a date written under DateStyle DMY failed every claim of the queue); an
-- enum value renamed, or an extension's type whose = is not found by pgdrain's pinned search_path
-- (citext compared as text), fail the claims too.
CREATE OR REPLACE FUNCTION outbox._key_type_problem(p_rel regclass, p_column text)
RETURNS text
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_type oid;
  v_collation oid;
  v_base oid;
BEGIN
  SELECT a.atttypid, a.attcollation INTO v_type, v_collation
  FROM pg_catalog.pg_attribute a
  WHERE a.attrelid = p_rel AND a.attname = p_column AND NOT a.attisdropped;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  v_base := v_type;
  FOR i IN 1..100 LOOP  -- a domain's base type, through domains over domains
    EXIT WHEN (SELECT t.typtype FROM pg_catalog.pg_type t WHERE t.oid = v_base) <> 'd';
    SELECT t.typbasetype INTO v_base FROM pg_catalog.pg_type t WHERE t.oid = v_base;
  END LOOP;
  IF v_base NOT IN ('pg_catalog.text'::regtype, 'pg_catalog.varchar'::regtype, 'pg_catalog.bpchar'::regtype,
                    'pg_catalog.int2'::regtype, 'pg_catalog.int4'::regtype, 'pg_catalog.int8'::regtype,
                    'pg_catalog.uuid'::regtype) THEN
    RETURN pg_catalog.format(
      'its type %s is not one whose values each have one text in every session (pgdrain keys '
      'partitions by the text): use a column of type text, varchar, char, smallint, integer, bigint '
      'or uuid, for example one generated from it',
      pg_catalog.format_type(v_type, NULL));
  END IF;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_collation c WHERE c.oid = v_collation AND NOT c.collisdeterministic) THEN
    RETURN pg_catalog.format(
      'its collation %s is nondeterministic: values it finds equal have different texts (pgdrain keys '
      'partitions by the text): use a deterministic collation',
      (SELECT pg_catalog.quote_ident(c.collname) FROM pg_catalog.pg_collation c WHERE c.oid = v_collation));
  END IF;
  RETURN NULL;
END;
$$;
