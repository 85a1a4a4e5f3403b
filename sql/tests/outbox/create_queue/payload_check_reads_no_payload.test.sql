-- PostgreSQL tests every CHECK of a table on every UPDATE, and a queue row is updated at least twice
-- (its lease or lock, its outcome). The payload check (pgdrain_payload_not_json_null) looks at the
-- payload's stored size before its value, so an update of a row whose payload is stored out of line
-- (TOAST) reads no more than one with a small payload; the check as it was before 00025 read the
-- whole payload every time. create_queue replaces a check of the old form, NOT VALID.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k') AS q \gset
-- 40 kB of hex digits: stored out of line, in about twenty chunks.
SELECT outbox.enqueue(:'q', 'e', jsonb_build_object('d', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 1250) g)), 'a') AS big \gset
SELECT outbox.enqueue(:'q', 'e', '{"d": 1}', 'b') AS small \gset

CREATE FUNCTION pg_temp.update_buffers(q text, id bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE plan json;
BEGIN
  EXECUTE format('EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) UPDATE %s SET leased_until = now() WHERE id = %s', q, id) INTO plan;
  RETURN (plan -> 0 -> 'Plan' ->> 'Shared Hit Blocks')::bigint + (plan -> 0 -> 'Plan' ->> 'Shared Read Blocks')::bigint;
END $$;

SELECT cmp_ok((SELECT pg_column_size(payload) FROM :q WHERE id = :big), '>', 20000, 'the large payload is stored out of line');
-- Warm: the first update of each row may prune or extend a page.
SELECT pg_temp.update_buffers(:'q', :big) + pg_temp.update_buffers(:'q', :small) AS warm \gset
SELECT pg_temp.update_buffers(:'q', :small) AS small_buffers \gset
SELECT cmp_ok(pg_temp.update_buffers(:'q', :big), '<=', :small_buffers + 1::bigint,
              'updating a row with a 40 kB payload reads no more buffers than one with a small payload');

-- The check as create_queue made it before 00025.
SELECT format('ALTER TABLE %s DROP CONSTRAINT pgdrain_payload_not_json_null, ADD CONSTRAINT pgdrain_payload_not_json_null CHECK (jsonb_typeof(payload) <> %L)', :'q', 'null') AS old_check \gset
:old_check;
SELECT pg_temp.update_buffers(:'q', :big) + pg_temp.update_buffers(:'q', :small) AS warm \gset
SELECT pg_temp.update_buffers(:'q', :small) AS small_buffers \gset
SELECT cmp_ok(pg_temp.update_buffers(:'q', :big), '>=', :small_buffers + 5::bigint,
              'the old check read the payload''s chunks on every update');

SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'k'), 'create_queue runs again');
SELECT is((SELECT pg_get_constraintdef(oid) LIKE '%pg_column_size(payload)%' AND NOT convalidated FROM pg_constraint
           WHERE conrelid = :'q'::regclass AND conname = 'pgdrain_payload_not_json_null'), true,
          'and replaces it, NOT VALID (the rows were checked by the old form)');
SELECT throws_ok(format('INSERT INTO %s (event_type, payload, k) VALUES (%L, %L, %L)', :'q', 'e', 'null', 'a'), '23514',
                 format('new row for relation "%s" violates check constraint "pgdrain_payload_not_json_null"', split_part(:'q', '.', 2)),
                 'a JSON null payload is still refused');
SELECT lives_ok(format('UPDATE %s SET leased_until = NULL', :'q'), 'and the rows it holds still pass');

SELECT * FROM finish();
ROLLBACK;
