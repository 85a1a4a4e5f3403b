-- apply_result validates its arguments (unknown queue 42P01; NULL id or token, unknown outcome,
-- bad names 22023 naming the argument) and a rejected call changes nothing.
BEGIN;
SELECT plan(11);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 1, 'a') AS a \gset
SELECT (:'a'::bigint[])[1] AS id \gset
SELECT lease_token AS t FROM outbox.claim_batch(:'q') \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok(format('SELECT outbox.apply_result(%L, %s, %L, %L)', 'public.no_such_queue_t6', :id, :'t', 'sent'), '42P01',
  'apply_result: queue public.no_such_queue_t6 is not registered (call outbox.create_queue first)',
  'apply_result names an unknown queue with 42P01');
SELECT throws_ok(format('SELECT outbox.apply_result(%L, %s, %L, %L)', 'public.x; drop table y', :id, :'t', 'sent'), '22023',
  'apply_result: queue must be a plain name "schema.table" (letters, digits, _), got ''public.x; drop table y''',
  'apply_result rejects a queue name carrying SQL');
SELECT throws_ok(format('SELECT outbox.apply_result(%L, %s, %L, %L)', 'a.b.c', :id, :'t', 'sent'), '22023',
  'apply_result: queue must be a plain name "schema.table" (letters, digits, _), got ''a.b.c''',
  'apply_result rejects a three-part name');
SELECT throws_ok(format('SELECT outbox.apply_result(%L, %s, NULL, %L)', :'q', :id, 'sent'), '22023',
  'apply_result: lease_token must not be NULL', 'apply_result rejects a NULL token');
SELECT throws_ok(format('SELECT outbox.apply_result(%L, NULL, %L, %L)', :'q', :'t', 'sent'), '22023',
  'apply_result: id must not be NULL', 'apply_result rejects a NULL id');
SELECT throws_ok(format('SELECT outbox.apply_result(%L, %s, %L, %L)', :'q', :id, :'t', 'done'), '22023',
  'apply_result: outcome must be ''sent'', ''transient'' or ''permanent'', got ''done''',
  'apply_result rejects an unknown outcome');
SELECT throws_ok(format('SELECT outbox.apply_result(%L, %s, %L, %L)', :'q', :id, :'t', 'SENT'), '22023',
  'apply_result: outcome must be ''sent'', ''transient'' or ''permanent'', got ''SENT''',
  'apply_result outcomes are case-sensitive');
SELECT throws_ok(format('SELECT outbox.apply_result(%L, %s, %L, NULL)', :'q', :id, :'t'), '22023',
  'apply_result: outcome must be ''sent'', ''transient'' or ''permanent'', got NULL',
  'apply_result rejects a NULL outcome');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'the rejected calls changed nothing');
SELECT ok(outbox.apply_result(:'q', :id, :'t', 'sent'), 'the lease holder can still record its result afterwards');
SELECT is(test_helpers.ids_where(:'q', 'sent_at IS NOT NULL'), ARRAY[:id::bigint], 'and the row is sent');

SELECT * FROM finish();
ROLLBACK;
