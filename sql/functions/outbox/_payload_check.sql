-- The expression of a queue table's CHECK pgdrain_payload_not_json_null: the payload is a JSON
-- value other than null. PostgreSQL tests every CHECK of a table on every UPDATE of a row, and a
-- row is updated at least twice (its lease or lock, its outcome): jsonb_typeof alone would read the
-- whole payload each time, and a payload stored out of line (TOAST, about 2 kB and up) would be
-- fetched, and decompressed, twice per event. Its stored size comes first: a JSON null is 12
-- bytes, so anything larger is not one and the payload itself is not read (OR stops at its first
-- true operand). Measured in docs/performance.md ("A payload read on every UPDATE").
CREATE OR REPLACE FUNCTION outbox._payload_check()
RETURNS text
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT 'pg_catalog.pg_column_size(payload) > 64 OR pg_catalog.jsonb_typeof(payload) <> ''null''';
$$;
