-- Pins the public SQL contract of the escalation ladder (DESIGN.md, schema alr): every function with
-- exactly its argument names, order and defaults, its result, a pinned search_path; the tables and
-- the lease_token column added by migration 00002 (nullable, documented).
BEGIN;
SELECT plan(59);

CREATE TEMP TABLE contract(schema_name text, name text, args text[], arguments text, result text) ON COMMIT DROP;
INSERT INTO contract VALUES
  ('core', 'new_id', '{}', '', 'uuid'),
  ('alr', 'add_alert', ARRAY['text'], 'name text', 'uuid'),
  ('alr', 'create_policy', ARRAY['text','jsonb'], 'name text, steps jsonb', 'uuid'),
  ('alr', 'start_escalation', ARRAY['uuid','uuid'], 'alert_id uuid, policy_id uuid', 'uuid'),
  ('alr', 'take_due_steps', ARRAY['integer','interval'],
   'batch_size integer DEFAULT 100, lease interval DEFAULT ''00:02:00''::interval',
   'TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text, lease_token uuid, leased_until timestamp with time zone)'),
  ('alr', 'apply_escalation', ARRAY['uuid','uuid'], 'escalation_id uuid, lease_token uuid', 'boolean'),
  ('alr', 'release_step', ARRAY['uuid','uuid'], 'escalation_id uuid, lease_token uuid', 'boolean'),
  ('alr', 'recorded_by', ARRAY['uuid','uuid'], 'escalation_id uuid, lease_token uuid', 'integer'),
  ('alr', 'resolve_alert', ARRAY['uuid'], 'alert_id uuid', 'void'),
  ('alr', 'acknowledge_alert', ARRAY['uuid','text'], 'alert_id uuid, note text DEFAULT NULL::text', 'boolean'),
  ('alr', 'resolved_alerts', ARRAY['integer'], 'max_rows integer DEFAULT 50',
   'TABLE(alert_id uuid, name text, created_at timestamp with time zone, acknowledged_at timestamp with time zone, acknowledged_by text, note text, resolved_at timestamp with time zone, steps_delivered bigint)'),
  ('alr', 'record_delivery', ARRAY['uuid','integer','uuid','text'],
   'escalation_id uuid, step_idx integer, lease_token uuid, error text DEFAULT NULL::text', 'bigint'),
  ('alr', 'unjournaled_steps', ARRAY['interval'], 'older_than interval DEFAULT ''00:10:00''::interval',
   'TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text, unjournaled_since timestamp with time zone)'),
  ('alr', 'version', '{}', 'OUT version text, OUT migration integer', 'record');

-- 15 x has_function
SELECT has_function(c.schema_name, c.name, c.args,
                    format('%s.%s(%s) exists', c.schema_name, c.name, array_to_string(c.args, ', ')))
FROM contract c ORDER BY c.name;
-- 15 x arguments and result
SELECT is(pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid),
          c.arguments || ' -> ' || c.result,
          format('%s.%s takes exactly the contract''s arguments and returns its result', c.schema_name, c.name))
FROM contract c
JOIN pg_proc p ON p.proname = c.name AND p.pronamespace = c.schema_name::regnamespace
ORDER BY c.name;

-- 1: every function of alr and core pins search_path = pg_catalog, pg_temp
SELECT is_empty($$
  SELECT p.oid::regprocedure::text FROM pg_proc p
  WHERE p.pronamespace IN ('alr'::regnamespace, 'core'::regnamespace)
    AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)$$,
  'every function of schemas alr and core runs with SET search_path = pg_catalog, pg_temp');

-- 2: the pre-token functions are gone (no unfenced overload survives migration 00002)
SELECT hasnt_function('alr', 'apply_escalation', ARRAY['uuid'], 'the unfenced apply_escalation(uuid) of 00001 is dropped');
SELECT is((SELECT count(*)::int FROM pg_proc WHERE proname = 'take_due_steps' AND pronamespace = 'alr'::regnamespace),
          1, 'exactly one take_due_steps exists');

-- 6 x tables
SELECT has_table('alr', t, format('table alr.%s exists', t))
FROM unnest(ARRAY['alerts', 'escalation_policies', 'escalation_steps', 'alert_escalations', 'delivery_journal',
                   'alert_acknowledgements']) t;

-- 1: the ladder's columns
SELECT columns_are('alr', 'alert_escalations',
  ARRAY['id', 'alert_id', 'policy_id', 'step_idx', 'next_at', 'stopped_at', 'stop_reason', 'leased_until',
        'lease_token', 'created_at', 'applied_tokens', 'unjournaled_since'],
  'alr.alert_escalations has exactly the ladder''s columns');
-- 8 x column types
SELECT col_type_is('alr', 'alert_escalations', c, t, format('alr.alert_escalations.%s is %s', c, t))
FROM (VALUES ('id', 'uuid'), ('alert_id', 'uuid'), ('policy_id', 'uuid'), ('step_idx', 'integer'),
             ('next_at', 'timestamp with time zone'), ('stopped_at', 'timestamp with time zone'),
             ('leased_until', 'timestamp with time zone'), ('lease_token', 'uuid')) v(c, t);
-- 4: lease_token is nullable (NULL = free), no default, documented as fencing; leased_until as a deadline
SELECT col_is_null('alr', 'alert_escalations', 'lease_token', 'lease_token is nullable: NULL means nobody holds the step');
SELECT col_hasnt_default('alr', 'alert_escalations', 'lease_token', 'lease_token has no default: only a take sets it');
SELECT matches((SELECT col_description(a.attrelid, a.attnum) FROM pg_attribute a
                WHERE a.attrelid = 'alr.alert_escalations'::regclass AND a.attname = 'lease_token'),
               '^Token of the current lease \(fencing\)\..*NULL = nobody holds',
               'the lease_token column carries the seed''s comment');
SELECT matches((SELECT col_description(a.attrelid, a.attnum) FROM pg_attribute a
                WHERE a.attrelid = 'alr.alert_escalations'::regclass AND a.attname = 'leased_until'),
               'A deadline, not ownership: ownership is proven by lease_token',
               'the leased_until column says a lease is a deadline, not ownership');
-- 3: alerts
SELECT columns_are('alr', 'alerts', ARRAY['id', 'name', 'state', 'created_at', 'resolved_at'],
                   'alr.alerts has id, name, state and its timestamps');
SELECT col_default_is('alr', 'alerts', 'state', 'firing', 'a plainly inserted alert is firing');
SELECT throws_ok($$INSERT INTO alr.alerts (name, state) VALUES ('x', 'pending')$$, '23514', NULL,
                 'alerts.state is only firing or resolved');
-- 2: steps
SELECT columns_are('alr', 'escalation_steps', ARRAY['policy_id', 'step_idx', 'delay', 'channel', 'target'],
                   'alr.escalation_steps has the ordered steps'' delay, channel and target');
SELECT col_type_is('alr', 'escalation_steps', 'delay', 'interval', 'a step''s delay is an interval');
-- 1: the due index take_due_steps reads
SELECT is(pg_get_indexdef('alr.alert_escalations_due'::regclass),
          'CREATE INDEX alert_escalations_due ON alr.alert_escalations USING btree (next_at) WHERE (stopped_at IS NULL)',
          'running ladders are read in next_at order through a partial index');
-- 1: the journal has no unique key on a step, so a second delivery of one step would be visible
SELECT is_empty($$SELECT i.indexrelid FROM pg_index i
                  WHERE i.indrelid = 'alr.delivery_journal'::regclass AND i.indisunique AND NOT i.indisprimary$$,
                'the delivery journal has no unique key on a step: duplicates would show, not hide');
-- 2: core.new_id gives fresh values
SELECT isnt(core.new_id(), core.new_id(), 'core.new_id returns a fresh uuid per call');
SELECT is((SELECT count(DISTINCT core.new_id()) FROM generate_series(1, 100))::int, 100,
          'core.new_id is evaluated per row');

SELECT * FROM finish();
ROLLBACK;
