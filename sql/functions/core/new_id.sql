-- A new random identifier (uuid v4). One place to change how ids and lease tokens are made; every
-- call returns a fresh value, so a per-row `SET lease_token = core.new_id()` gives each row its own.
CREATE OR REPLACE FUNCTION core.new_id()
RETURNS uuid
LANGUAGE sql
VOLATILE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.gen_random_uuid();
$$;
