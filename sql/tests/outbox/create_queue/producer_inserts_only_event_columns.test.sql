-- pgdrain_producer writes an event, nothing that steers its delivery: create_queue grants it INSERT
-- on the event's columns only (also an adopted table's own columns), SELECT (id) for RETURNING id
-- and the id sequence; an id, attempt_count, lease, sent_at, backoff or last_error is refused.
BEGIN;
SELECT plan(12);

SELECT test_helpers.new_queue('k') AS q \gset
CREATE TABLE public.reg_adopt_cols (id bigserial PRIMARY KEY, event_type text NOT NULL, payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), k text NOT NULL, tenant text);
SELECT outbox.create_queue('public.reg_adopt_cols', 'k');

SELECT ok(NOT has_table_privilege('pgdrain_producer', :'q', 'INSERT'),
          'the producer has no table-wide INSERT on a created queue table');
SELECT ok(NOT has_table_privilege('pgdrain_producer', 'public.reg_adopt_cols', 'INSERT'),
          'nor on an adopted one');
SELECT is((SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
           WHERE attrelid = 'public.reg_adopt_cols'::regclass AND attnum > 0 AND NOT attisdropped
             AND has_column_privilege('pgdrain_producer', attrelid, attnum, 'INSERT')),
          ARRAY['event_type', 'payload', 'created_at', 'k', 'tenant', 'headers', 'event_id'],
          'the producer may insert exactly the event''s columns, the adopted table''s own included');

SET LOCAL ROLE pgdrain_producer;
SELECT lives_ok(format('INSERT INTO %s (event_type, payload, k) VALUES (%L, %L, %L) RETURNING id', :'q', 'e', '{}', 'a'),
                'a plain INSERT of an event, RETURNING id, works');
SELECT lives_ok($$INSERT INTO public.reg_adopt_cols (event_type, payload, k, tenant) VALUES ('e', '{}', 'a', 't') RETURNING id$$,
                'also on the adopted table, with its own column and its serial id');
SELECT throws_ok(format('INSERT INTO %s (event_type, payload, k, leased_until) VALUES (%L, %L, %L, %L)', :'q', 'e', '{}', 'a', 'infinity'),
                 '42501', NULL, 'an everlasting lease is refused');
SELECT throws_ok(format('INSERT INTO %s (event_type, payload, k, attempt_count) VALUES (%L, %L, %L, -5)', :'q', 'e', '{}', 'a'),
                 '42501', NULL, 'an attempt_count is refused');
SELECT throws_ok(format('INSERT INTO %s (id, event_type, payload, k) VALUES (9000000000000000000, %L, %L, %L)', :'q', 'e', '{}', 'a'),
                 '42501', NULL, 'an explicit id is refused');
SELECT throws_ok(format('INSERT INTO %s (event_type, payload, k, sent_at) VALUES (%L, %L, %L, now())', :'q', 'e', '{}', 'a'),
                 '42501', NULL, 'sent_at is refused');
SELECT throws_ok(format('INSERT INTO %s (event_type, payload, k, next_attempt_at, lease_token, last_error) VALUES (%L, %L, %L, now(), gen_random_uuid(), %L)', :'q', 'e', '{}', 'a', 'x'),
                 '42501', NULL, 'a backoff, a token and an error are refused');
RESET ROLE;

SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'k'), 'create_queue can run again');
SELECT ok(NOT has_table_privilege('pgdrain_producer', :'q', 'INSERT')
          AND has_column_privilege('pgdrain_producer', :'q', 'payload', 'INSERT')
          AND NOT has_column_privilege('pgdrain_producer', :'q', 'leased_until', 'INSERT'),
          'and grants the same again');

SELECT * FROM finish();
ROLLBACK;
