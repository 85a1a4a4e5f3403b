-- Why row level security of table p_rel would filter what pgdrain's functions read, or NULL when it
-- does not. The functions are SECURITY DEFINER and run as p_definer (the owner of the outbox
-- functions); a policy applies to that role when the table has ROW LEVEL SECURITY enabled and either
-- forces it on its owner (FORCE ROW LEVEL SECURITY) or is owned by a role p_definer does not have
-- the privileges of, unless p_definer is a superuser or has BYPASSRLS. Such a policy is evaluated in
-- each caller's session (a drainer's settings, not a producer's): claims, results, stats, repair and
-- the commit step then see only the rows it shows them, and the others are never delivered and
-- counted nowhere.
CREATE OR REPLACE FUNCTION outbox._row_security_problem(p_rel regclass, p_definer oid)
RETURNS text
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.format(
    'has row level security that applies to %s, the role pgdrain''s functions run as (%s): claims, '
    'stats and repair would see only the rows its policies show the drainer''s session, and never '
    'deliver the others; pgdrain needs every row of a queue table',
    pg_catalog.pg_get_userbyid(p_definer),
    CASE WHEN c.relforcerowsecurity THEN 'FORCE ROW LEVEL SECURITY'
         ELSE pg_catalog.format('the table is owned by %s', pg_catalog.pg_get_userbyid(c.relowner)) END)
  FROM pg_catalog.pg_class c, pg_catalog.pg_roles r
  WHERE c.oid = p_rel AND r.oid = p_definer
    AND c.relrowsecurity AND NOT (r.rolsuper OR r.rolbypassrls)
    AND (c.relforcerowsecurity OR NOT pg_catalog.pg_has_role(p_definer, c.relowner, 'USAGE'))
$$;
