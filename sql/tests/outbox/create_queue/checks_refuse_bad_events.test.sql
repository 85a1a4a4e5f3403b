-- A queue table created by create_queue refuses, also on a plain INSERT by its owner, a negative
-- attempt_count, a JSON null payload and an empty or blank partition key (the rules enqueue checks),
-- with errors naming the rule
-- (CHECK constraints pgdrain_*); create_queue can run again.
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT split_part(:'q', '.', 2) AS t \gset

SELECT throws_ok(format('INSERT INTO %s (event_type, payload, k) VALUES (%L, %L, %L)', :'q', 'e', 'null', 'a'), '23514',
                 format('new row for relation "%s" violates check constraint "pgdrain_payload_not_json_null"', :'t'),
                 'a JSON null payload is refused');
SELECT throws_ok(format('INSERT INTO %s (event_type, payload, k) VALUES (%L, %L, %L), (%L, %L, %L)', :'q', 'e', '{}', 'a', 'e', '{}', ''), '23514',
                 format('new row for relation "%s" violates check constraint "pgdrain_partition_key_not_empty"', :'t'),
                 'an empty partition key is refused (and the statement with it)');
SELECT throws_ok(format('INSERT INTO %s (event_type, payload, k) VALUES (%L, %L, %L)', :'q', 'e', '{}', '  '), '23514',
                 format('new row for relation "%s" violates check constraint "pgdrain_partition_key_not_empty"', :'t'),
                 'so is a blank one, as in enqueue');
SELECT throws_ok(format('INSERT INTO %s (event_type, payload, k, attempt_count) VALUES (%L, %L, %L, -1)', :'q', 'e', '{}', 'a'), '23514',
                 format('new row for relation "%s" violates check constraint "pgdrain_attempt_count_not_negative"', :'t'),
                 'a negative attempt_count is refused');
SELECT lives_ok(format('INSERT INTO %s (event_type, payload, k) VALUES (%L, %L, %L), (%L, %L, %L)', :'q', 'e', '{"a": null}', 'a', 'e', '"null"', ' a '),
                'a payload holding a null, the JSON string "null" and a key with spaces around it are events');
SELECT results_eq(format($$SELECT conname::text COLLATE "default", convalidated FROM pg_constraint WHERE conrelid = %L::regclass AND conname LIKE 'pgdrain%%' ORDER BY 1$$, :'q'),
                  $$VALUES ('pgdrain_attempt_count_not_negative'::text, true), ('pgdrain_headers_string_object', true), ('pgdrain_next_attempt_at_within_max_delay', true),
                           ('pgdrain_partition_key_not_empty', true), ('pgdrain_payload_not_json_null', true)$$,
                  'the created table has the five checks, validated');
SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'k'), 'create_queue can run again');
SELECT is((SELECT count(*) FROM pg_constraint WHERE conrelid = :'q'::regclass AND conname LIKE 'pgdrain%'), 5::bigint,
          'and adds no second copy');

CREATE TABLE public.reg_uuid_key (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_type text NOT NULL,
  payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), k uuid NOT NULL);
SELECT outbox.create_queue('public.reg_uuid_key', 'k');
SELECT is((SELECT array_agg(conname::text ORDER BY conname) FROM pg_constraint
           WHERE conrelid = 'public.reg_uuid_key'::regclass AND conname LIKE 'pgdrain%'),
          ARRAY['pgdrain_attempt_count_not_negative', 'pgdrain_headers_string_object', 'pgdrain_next_attempt_at_within_max_delay',
                'pgdrain_payload_not_json_null'],
          'a partition key that is not a string has no emptiness check');

SELECT * FROM finish();
ROLLBACK;
