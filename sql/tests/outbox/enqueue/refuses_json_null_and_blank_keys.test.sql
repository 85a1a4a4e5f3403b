-- enqueue refuses a JSON null payload ('null'::jsonb: an event with nothing in it, most likely a
-- serialised nil) and an empty or blank partition key (every producer that lost its key would
-- share one partition) with 22023 naming the argument, and inserts nothing. Every other JSON value,
-- and a key with blanks around other characters, is accepted as it is.
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue('k') AS p \gset
SELECT test_helpers.new_queue() AS u \gset
SELECT test_helpers.state(:'p') AS pb \gset
SELECT test_helpers.state(:'u') AS ub \gset

SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', 'e', 'null', 'a'), '22023',
  'enqueue: payload must not be JSON null (use ''{}''::jsonb for an empty payload)', 'enqueue refuses a JSON null payload');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L)', :'u', 'e', 'null'), '22023',
  'enqueue: payload must not be JSON null (use ''{}''::jsonb for an empty payload)', 'on an unpartitioned queue too');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', 'e', '{}', ''), '22023',
  'enqueue: partition_key must be a non-empty string, got ''''', 'enqueue refuses an empty partition key');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', 'e', '{}', '   '), '22023',
  'enqueue: partition_key must be a non-empty string, got ''   ''', 'enqueue refuses a blank partition key');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'u', 'e', '{}', ''), '22023',
  format('enqueue: partition_key must be NULL: queue %s has no partition column', :'u'),
  'an empty key on an unpartitioned queue is refused as any key is');
SELECT is(test_helpers.state(:'p'), :'pb'::jsonb, 'the refused calls inserted nothing and used no id (partitioned)');
SELECT is(test_helpers.state(:'u'), :'ub'::jsonb, 'the refused calls inserted nothing and used no id (unpartitioned)');

SELECT outbox.enqueue(:'p', 'e', '[]', ' a ') AS a1, outbox.enqueue(:'p', 'e', '"text"', 'b') AS b1,
       outbox.enqueue(:'p', 'e', '0', 'b') AS b2, outbox.enqueue(:'u', 'e', '{"x": null}') AS u1 \gset
SELECT results_eq(format('SELECT id, payload, k FROM %s ORDER BY id', :'p'),
  format($$VALUES (%s::bigint, '[]'::jsonb, ' a '::text), (%s, '"text"', 'b'), (%s, '0', 'b')$$, :a1, :b1, :b2),
  'other JSON values and a key with blanks around it are stored as given');
SELECT results_eq(format('SELECT payload FROM %s', :'u'), $$VALUES ('{"x": null}'::jsonb)$$,
  'a null inside an object is a payload like any other');

SELECT * FROM finish();
ROLLBACK;
