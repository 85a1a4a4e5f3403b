-- Pins the public SQL contract of DESIGN.md: every function of schema outbox with exactly its
-- argument types, names, order and defaults, its result, a pinned search_path; and the registry
-- tables the functions keep.
BEGIN;
SELECT plan(178);

CREATE TEMP TABLE contract(name text, args text[], arguments text, result text, returns text) ON COMMIT DROP;
INSERT INTO contract VALUES
  ('create_queue', ARRAY['text','text','integer','interval','interval','text','text','interval'],
   'queue text, partition_column text DEFAULT NULL::text, max_attempts integer DEFAULT 10, backoff_min interval DEFAULT ''00:00:01''::interval, backoff_max interval DEFAULT ''00:00:30''::interval, permanent_policy text DEFAULT ''poison''::text, channel text DEFAULT NULL::text, max_delay interval DEFAULT ''7 days''::interval',
   'void', 'void'),
  ('drop_queue', ARRAY['text','boolean'], 'queue text, drop_table boolean DEFAULT false', 'void', 'void'),
  ('enqueue', ARRAY['text','text','jsonb','text','timestamp with time zone','jsonb','uuid'],
   'queue text, event_type text, payload jsonb, partition_key text DEFAULT NULL::text, deliver_at timestamp with time zone DEFAULT NULL::timestamp with time zone, headers jsonb DEFAULT NULL::jsonb, event_id uuid DEFAULT NULL::uuid', 'bigint', 'bigint'),
  ('enqueue_event', ARRAY['text','text','jsonb','text','timestamp with time zone','jsonb','uuid'],
   'queue text, event_type text, payload jsonb, partition_key text DEFAULT NULL::text, deliver_at timestamp with time zone DEFAULT NULL::timestamp with time zone, headers jsonb DEFAULT NULL::jsonb, event_id uuid DEFAULT NULL::uuid',
   'TABLE(id bigint, event_id uuid)', 'setof record'),
  ('claim_batch', ARRAY['text','integer','interval'],
   'queue text, batch_size integer DEFAULT 32, lease interval DEFAULT ''00:00:30''::interval',
   'TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer, lease_token uuid, leased_until timestamp with time zone, created_at timestamp with time zone, event_id uuid, headers jsonb)',
   'setof record'),
  ('apply_result', ARRAY['text','bigint','uuid','text','text','timestamp with time zone'],
   'queue text, id bigint, lease_token uuid, outcome text, error text DEFAULT NULL::text, retry_at timestamp with time zone DEFAULT NULL::timestamp with time zone', 'boolean', 'boolean'),
  ('apply_results', ARRAY['text','bigint[]','uuid[]','text[]','text[]','timestamp with time zone[]'],
   'queue text, ids bigint[], lease_tokens uuid[], outcomes text[], errors text[] DEFAULT NULL::text[], retry_at timestamp with time zone[] DEFAULT NULL::timestamp with time zone[]',
   'TABLE(id bigint, applied boolean)', 'setof record'),
  ('claim_locked', ARRAY['text','integer'], 'queue text, batch_size integer DEFAULT 32',
   'TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer, created_at timestamp with time zone, event_id uuid, headers jsonb)',
   'setof record'),
  ('settle_locked', ARRAY['text','bigint[]','text[]','text[]','timestamp with time zone[]'],
   'queue text, ids bigint[], outcomes text[], errors text[] DEFAULT NULL::text[], retry_at timestamp with time zone[] DEFAULT NULL::timestamp with time zone[]', 'bigint', 'bigint'),
  ('extend_lease', ARRAY['text','bigint','uuid','interval'],
   'queue text, id bigint, lease_token uuid, lease interval', 'timestamp with time zone', 'timestamp with time zone'),
  ('release', ARRAY['text','bigint','uuid'], 'queue text, id bigint, lease_token uuid', 'boolean', 'boolean'),
  ('stats', ARRAY['text'], 'queue text',
   'TABLE(pending bigint, ready bigint, leased bigint, backing_off bigint, poisoned bigint, oldest_pending_at timestamp with time zone, oldest_pending_age interval)',
   'setof record'),
  ('wedged_partitions', ARRAY['text','interval','integer'],
   'queue text, older_than interval, max_partitions integer DEFAULT 10',
   'TABLE(partition_key text, head_id bigint, head_attempt_count integer, head_last_error text, oldest_pending_at timestamp with time zone, pending bigint, reason text)',
   'setof record'),
  ('check_indexes', ARRAY['text'], 'queue text', 'TABLE(problem text, index_name text, detail text)', 'setof record'),
  ('requeue_poisoned', ARRAY['text','bigint[]'], 'queue text, ids bigint[] DEFAULT NULL::bigint[]', 'bigint', 'bigint'),
  ('purge_sent', ARRAY['text','interval','integer'],
   'queue text, older_than interval DEFAULT ''7 days''::interval, max_rows integer DEFAULT 10000', 'bigint', 'bigint'),
  -- Beyond DESIGN.md's table (added in 00004): what a worker needs without reading tables, and the
  -- check and repair of the partition heads.
  ('queue_info', ARRAY['text'], 'queue text',
   'TABLE(queue_name text, partition_column text, max_attempts integer, backoff_min interval, backoff_max interval, permanent_policy text, channel text, max_delay interval)',
   'setof record'),
  ('next_due', ARRAY['text'], 'queue text', 'timestamp with time zone', 'timestamp with time zone'),
  ('repair', ARRAY['text','boolean'], 'queue text, dry_run boolean DEFAULT false',
   'TABLE(partition_key text, cause text, head_id bigint, detail text)', 'setof record'),
  -- 00051: whether claims are rebuilding the heads after a crash, for callers who may not read them.
  ('heads_rebuild', ARRAY['text'], 'queue text', 'TABLE(rebuilding boolean, rebuilt_through text)', 'setof record'),
  ('poisoned_rows', ARRAY['text','integer','bigint'], 'queue text, max_rows integer DEFAULT 50, before_id bigint DEFAULT NULL::bigint',
   'TABLE(id bigint, event_id uuid, event_type text, partition_key text, attempt_count integer, last_error text, created_at timestamp with time zone, payload_preview text)',
   'setof record'),
  ('release_lease', ARRAY['text','bigint','timestamp with time zone'], 'queue text, id bigint, leased_until timestamp with time zone DEFAULT NULL::timestamp with time zone', 'boolean', 'boolean'),
  -- 00020: producers NOTIFY only while a drainer waits, when a queue says so.
  ('set_notify', ARRAY['text','text'], 'queue text, notify text', 'void', 'void'),
  ('drainer_waits', ARRAY['text','interval'], 'queue text, wait interval', 'bigint', 'bigint'),
  ('drainer_woke', ARRAY['text','bigint'], 'queue text, mark bigint', 'void', 'void'),
  -- 0.1.0: a queue's drainers take turns to claim while rows trickle in.
  ('claim_turn', ARRAY['text','interval'], 'queue text, pause interval', 'interval', 'interval'),
  -- 00025: operators skip (poison), retry now and dismiss rows, fenced and logged.
  ('poison_row', ARRAY['text','bigint','integer','text'], 'queue text, id bigint, attempt_count integer, reason text',
   'boolean', 'boolean'),
  ('retry_row', ARRAY['text','bigint','integer','text'],
   'queue text, id bigint, attempt_count integer, reason text DEFAULT NULL::text', 'boolean', 'boolean'),
  ('dismiss_poisoned', ARRAY['text','bigint[]','text'], 'queue text, ids bigint[], reason text', 'bigint', 'bigint'),
  ('operator_log', ARRAY['text','integer','bigint'],
   'queue text, max_rows integer DEFAULT 50, before_action_id bigint DEFAULT NULL::bigint',
   'TABLE(action_id bigint, acted_at timestamp with time zone, action text, id bigint, event_id uuid, partition_key text, attempt_count integer, reason text, acted_by text)',
   'setof record'),
  -- The schema's release and last migration (pgdrain --version; the drainer's start-up check).
  ('version', '{}', 'OUT version text, OUT migration integer', 'record', 'record'),
  -- 00025: claims that take a partition's next rows with its head (issue 28).
  ('claim_runs', ARRAY['text','integer','interval','integer'],
   'queue text, batch_size integer DEFAULT 32, lease interval DEFAULT ''00:00:30''::interval, run_length integer DEFAULT 8',
   'TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer, lease_token uuid, leased_until timestamp with time zone, created_at timestamp with time zone, event_id uuid, headers jsonb)',
   'setof record'),
  ('claim_locked_runs', ARRAY['text','integer','integer'], 'queue text, batch_size integer DEFAULT 32, run_length integer DEFAULT 8',
   'TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer, created_at timestamp with time zone, event_id uuid, headers jsonb)',
   'setof record');

-- 32 x has_function
SELECT has_function('outbox', c.name, c.args, format('outbox.%s(%s) exists', c.name, array_to_string(c.args, ', ')))
FROM contract c ORDER BY c.name;
-- 32 x function_returns
SELECT function_returns('outbox', c.name, c.args, c.returns, format('outbox.%s returns %s', c.name, c.returns))
FROM contract c ORDER BY c.name;
-- 32 x argument names, order and defaults
SELECT is(pg_get_function_arguments(p.oid), c.arguments,
          format('outbox.%s takes exactly the contract''s arguments, names and defaults', c.name))
FROM contract c
JOIN pg_proc p ON p.proname = c.name AND p.pronamespace = 'outbox'::regnamespace
ORDER BY c.name;
-- 32 x result shape (the columns of TABLE results)
SELECT is(pg_get_function_result(p.oid), c.result, format('outbox.%s has the contract''s result columns', c.name))
FROM contract c
JOIN pg_proc p ON p.proname = c.name AND p.pronamespace = 'outbox'::regnamespace
ORDER BY c.name;
-- 32 x one overload only (a second signature would make calls ambiguous)
SELECT is((SELECT count(*) FROM pg_proc p WHERE p.proname = c.name AND p.pronamespace = 'outbox'::regnamespace),
          1::bigint, format('outbox.%s has exactly one signature', c.name))
FROM contract c ORDER BY c.name;

SELECT is_empty(
  $$SELECT p.proname FROM pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace
      AND NOT ('search_path=pg_catalog, pg_temp' = ANY (COALESCE(p.proconfig, '{}')))$$,
  'every function of schema outbox pins search_path to pg_catalog, then pg_temp (never the temporary schema first)');

SELECT is_empty(
  $$SELECT p.proname FROM pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname !~ '^(_|tg_)'
    EXCEPT SELECT name FROM contract$$,
  'schema outbox exposes no public function beyond the contract (helpers start with _ or tg_)');

SELECT has_table('outbox', 'queues', 'the registry table outbox.queues exists');
SELECT columns_are('outbox', 'queues',
  ARRAY['queue_id','queue','table_oid','partition_column','partition_type','max_attempts','backoff_min',
        'backoff_max','permanent_policy','channel','created_at','id_sequence','clock_base','notify','max_delay'],
  'outbox.queues records each queue''s table and settings');
SELECT col_type_is('outbox', 'queues', 'table_oid', 'regclass',
  'outbox.queues names its table by regclass (pg_dump writes a name, pg_restore reads back the restored table)');
SELECT col_type_is('outbox', 'queues', 'id_sequence', 'regclass', 'and its id sequence too');
SELECT col_is_pk('outbox', 'queues', 'queue_id', 'outbox.queues is keyed by queue_id');
SELECT col_is_unique('outbox', 'queues', 'queue', 'a queue name is registered at most once');
SELECT col_is_unique('outbox', 'queues', 'table_oid', 'a table is the queue table of at most one queue (and its producers find their queue by index)');
SELECT has_table('outbox', 'partition_heads', 'the partition head table outbox.partition_heads exists');
SELECT columns_are('outbox', 'partition_heads',
  ARRAY['queue_id','partition_key','head_id','attempt_count','parked_until','floor_id'],
  'outbox.partition_heads holds one head per partition with pending work');
SELECT col_is_pk('outbox', 'partition_heads', ARRAY['queue_id','partition_key'],
  'outbox.partition_heads has one row per (queue, partition)');
SELECT indexes_are('outbox', 'partition_heads',
  ARRAY['partition_heads_pkey','partition_heads_ready','partition_heads_parked'],
  'outbox.partition_heads has exactly its key, ready and parked indexes');

SELECT * FROM finish();
ROLLBACK;
