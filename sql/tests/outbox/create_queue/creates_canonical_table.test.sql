-- create_queue creates the canonical queue table with a NOT NULL partition column and records the
-- queue's settings in outbox.queues.
BEGIN;
SELECT plan(22);

SELECT test_helpers.fresh_name() AS q \gset
SELECT split_part(:'q', '.', 2) AS t \gset

SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L, 5, %L, %L, %L, %L)',
                       :'q', 'resource_id', '2 seconds', '1 minute', 'poison', 'my_channel'),
                'create_queue creates a partitioned queue');
SELECT has_table('public', :'t', 'create_queue creates the queue table');
SELECT columns_are('public', :'t',
  ARRAY['id','event_type','payload','created_at','attempt_count','next_attempt_at','sent_at',
        'leased_until','lease_token','last_error','event_id','headers','resource_id'],
  'the queue table has exactly the canonical columns plus the partition column');
SELECT col_is_pk('public', :'t', 'id', 'id is the primary key');
SELECT col_type_is('public', :'t', 'id', 'bigint', 'id is bigint');
SELECT col_type_is('public', :'t', 'payload', 'jsonb', 'payload is jsonb');
SELECT col_type_is('public', :'t', 'attempt_count', 'integer', 'attempt_count is integer');
SELECT col_not_null('public', :'t', 'attempt_count', 'attempt_count is NOT NULL');
SELECT col_default_is('public', :'t', 'attempt_count', '0', 'attempt_count defaults to 0');
SELECT col_type_is('public', :'t', 'lease_token', 'uuid', 'lease_token is uuid');
SELECT col_is_null('public', :'t', 'lease_token', 'lease_token is nullable (NULL = nobody holds it)');
SELECT col_type_is('public', :'t', 'leased_until', 'timestamp with time zone', 'leased_until is timestamptz');
SELECT col_is_null('public', :'t', 'leased_until', 'leased_until is nullable');
SELECT col_not_null('public', :'t', 'resource_id', 'the partition column is NOT NULL (NULL keys would lose order)');

SELECT throws_ok(format('INSERT INTO %s (event_type, payload) VALUES (''e'', ''{}'')', :'q'), '23502', NULL,
                 'a row without a partition key is refused by the table itself');

SELECT results_eq(
  format($$SELECT queue, table_oid, partition_column, partition_type, max_attempts, backoff_min, backoff_max,
                  permanent_policy, channel FROM outbox.queues WHERE queue = %L$$, :'q'),
  format($$VALUES (%L::text, %L::regclass, 'resource_id'::text, 'text'::text, 5, interval '2 seconds',
                   interval '1 minute', 'poison'::text, 'my_channel'::text)$$, :'q', :'q'),
  'create_queue records the queue''s settings in outbox.queues');

-- Unpartitioned, every default; an unqualified name means schema public, names fold to lower case.
SELECT test_helpers.fresh_name() AS q2 \gset
SELECT upper(split_part(:'q2', '.', 2)) AS t2_upper \gset
SELECT lives_ok(format('SELECT outbox.create_queue(%L)', :'t2_upper'),
                'create_queue accepts an unqualified, upper-case name');
SELECT results_eq(
  format($$SELECT queue, partition_column, partition_type, max_attempts, backoff_min, backoff_max,
                  permanent_policy, channel FROM outbox.queues WHERE table_oid = %L::regclass$$, :'q2'),
  format($$VALUES (%L::text, NULL::text, NULL::text, 10, interval '1 second', interval '30 seconds',
                   'poison'::text, %L::text)$$, :'q2', 'pgdrain_public_' || split_part(:'q2', '.', 2)),
  'an unpartitioned queue is registered as public.<lower-case name> with the documented defaults');
SELECT columns_are('public', split_part(:'q2', '.', 2),
  ARRAY['id','event_type','payload','created_at','attempt_count','next_attempt_at','sent_at',
        'leased_until','lease_token','last_error','event_id','headers'],
  'an unpartitioned queue table has exactly the canonical columns');
SELECT is((SELECT count(*) FROM outbox.partition_heads h JOIN outbox.queues q USING (queue_id) WHERE q.queue = :'q2'),
          0::bigint, 'an unpartitioned queue keeps no partition heads');

-- A retry policy is allowed on an unpartitioned queue.
SELECT test_helpers.fresh_name() AS q3 \gset
SELECT lives_ok(format('SELECT outbox.create_queue(%L, NULL, 3, %L, %L, %L)', :'q3', '1 second', '1 second', 'retry'),
                'permanent_policy retry is accepted on an unpartitioned queue');
SELECT is((SELECT permanent_policy FROM outbox.queues WHERE queue = :'q3'), 'retry',
          'the retry policy is recorded');

SELECT * FROM finish();
ROLLBACK;
