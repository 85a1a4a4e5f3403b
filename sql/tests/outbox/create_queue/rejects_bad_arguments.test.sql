-- create_queue validates every argument before touching anything: each bad input raises 22023
-- (3F000 for a missing schema) with a message naming the argument, and changes nothing.
BEGIN;
SELECT plan(27);

SELECT test_helpers.new_queue('resource_id') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS ids \gset
SELECT test_helpers.fresh_name() AS fresh \gset
SELECT test_helpers.state(:'q') AS before \gset
SELECT test_helpers.state(:'fresh') AS before_fresh \gset

SELECT throws_ok($$SELECT outbox.create_queue(NULL)$$, '22023',
  'create_queue: queue must not be NULL', 'create_queue rejects a NULL queue');
SELECT throws_ok($$SELECT outbox.create_queue('public.x; drop table y')$$, '22023',
  'create_queue: queue must be a plain name "schema.table" (letters, digits, _), got ''public.x; drop table y''',
  'create_queue rejects a queue name carrying SQL');
SELECT throws_ok($$SELECT outbox.create_queue('a.b.c')$$, '22023',
  'create_queue: queue must be a plain name "schema.table" (letters, digits, _), got ''a.b.c''',
  'create_queue rejects a three-part name');
SELECT throws_ok($$SELECT outbox.create_queue('"Quoted".t')$$, '22023',
  'create_queue: queue must be a plain name "schema.table" (letters, digits, _), got ''"Quoted".t''',
  'create_queue rejects a quoted identifier');
SELECT throws_ok($$SELECT outbox.create_queue('')$$, '22023',
  'create_queue: queue must be a plain name "schema.table" (letters, digits, _), got ''''',
  'create_queue rejects an empty name');
SELECT throws_ok($$SELECT outbox.create_queue('no_such_schema_t6.t')$$, '3F000',
  'create_queue: schema no_such_schema_t6 does not exist', 'create_queue names a missing schema');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L)', :'fresh', 'k; drop table y'), '22023',
  'create_queue: partition_column must be a plain column name, got ''k; drop table y''',
  'create_queue rejects a partition column that is not a plain name');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L)', :'fresh', 'id'), '22023',
  'create_queue: partition_column must not be one of the queue''s own columns, got ''id''',
  'create_queue rejects a canonical column as partition column');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L)', :'fresh', 'event_id'), '22023',
  'create_queue: partition_column must not be one of the queue''s own columns, got ''event_id''',
  'create_queue rejects the event_id column as partition column');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L)', :'fresh', 'headers'), '22023',
  'create_queue: partition_column must not be one of the queue''s own columns, got ''headers''',
  'create_queue rejects the headers column as partition column');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L)', :'fresh', 'xmin'), '22023',
  'create_queue: partition_column must not be a system column, got ''xmin''',
  'create_queue rejects a system column as partition column');
SELECT throws_ok($$SELECT outbox.create_queue('pg_catalog.events')$$, '22023',
  'create_queue: queue must be a table of an application''s schema, not of the system schema pg_catalog, got pg_catalog.events',
  'create_queue rejects a table in pg_catalog');
SELECT throws_ok($$SELECT outbox.create_queue('information_schema.events')$$, '22023',
  'create_queue: queue must be a table of an application''s schema, not of the system schema information_schema, got information_schema.events',
  'create_queue rejects a table in information_schema');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, NULL, 0)', :'fresh'), '22023',
  'create_queue: max_attempts must be between 1 and 1000, got 0', 'create_queue rejects max_attempts 0');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, NULL, 1001)', :'fresh'), '22023',
  'create_queue: max_attempts must be between 1 and 1000, got 1001', 'create_queue rejects max_attempts 1001');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, NULL, NULL)', :'fresh'), '22023',
  'create_queue: max_attempts must be between 1 and 1000, got NULL', 'create_queue rejects a NULL max_attempts');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, NULL, 10, %L)', :'fresh', '0'), '22023',
  'create_queue: backoff_min must be greater than 0, got 00:00:00', 'create_queue rejects a zero backoff_min');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, NULL, 10, %L, %L)', :'fresh', '10 seconds', '1 second'), '22023',
  'create_queue: backoff_max must be between backoff_min (00:00:10) and 1 day, got 00:00:01',
  'create_queue rejects backoff_max below backoff_min');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, NULL, 10, %L, %L)', :'fresh', '1 second', '2 days'), '22023',
  'create_queue: backoff_max must be between backoff_min (00:00:01) and 1 day, got 2 days',
  'create_queue rejects backoff_max above one day');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, NULL, 10, %L, %L, %L)', :'fresh', '1 second', '1 minute', 'ignore'), '22023',
  'create_queue: permanent_policy must be ''poison'' or ''retry'', got ''ignore''',
  'create_queue rejects an unknown permanent_policy');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L, 10, %L, %L, %L)', :'fresh', 'resource_id', '1 second', '1 minute', 'retry'), '22023',
  'create_queue: permanent_policy ''retry'' is not allowed with a partition_column: an event that can never apply would wedge its partition forever',
  'create_queue rejects the retry policy together with a partition column');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L, 10, %L, %L, %L)', :'q', 'resource_id', '1 second', '1 minute', 'retry'), '22023',
  'create_queue: permanent_policy ''retry'' is not allowed with a partition_column: an event that can never apply would wedge its partition forever',
  'create_queue rejects switching a partitioned queue to the retry policy');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, NULL, 10, %L, %L, %L, %L)', :'fresh', '1 second', '1 minute', 'poison', 'bad channel'), '22023',
  'create_queue: channel must be a plain name of at most 63 characters, got ''bad channel''',
  'create_queue rejects a channel that is not a plain name');
SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L, 0)', :'q', 'resource_id'), '22023',
  'create_queue: max_attempts must be between 1 and 1000, got 0',
  'create_queue rejects bad settings for a registered queue too');

SELECT is(test_helpers.state(:'q'), :'before'::jsonb,
          'the rejected calls on a registered queue changed nothing (rows, heads, registry, indexes, triggers)');
SELECT is(test_helpers.state(:'fresh'), :'before_fresh'::jsonb,
          'the rejected calls on a new name created no table and registered nothing');
SELECT is(to_regclass(:'fresh'), NULL, 'no table exists under the rejected new name');

SELECT * FROM finish();
ROLLBACK;
