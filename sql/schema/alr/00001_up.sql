-- core: tiny shared helpers (core.new_id); may be shared by other modules, hence IF NOT EXISTS.
CREATE SCHEMA IF NOT EXISTS core;
CREATE SCHEMA alr;
COMMENT ON SCHEMA alr IS 'pgdrain: alert escalation ladder (due steps leased in batches, record then deliver)';

CREATE TABLE alr.alerts (
  id uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
  name text NOT NULL CHECK (name <> ''),
  state text NOT NULL DEFAULT 'firing' CHECK (state IN ('firing', 'resolved')),
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  resolved_at timestamptz,
  CHECK ((state = 'resolved') = (resolved_at IS NOT NULL))
);
COMMENT ON TABLE alr.alerts IS
  'Alerts that escalate. Insert with alr.add_alert(name) or a plain INSERT (state defaults to firing); '
  'resolve with alr.resolve_alert, which also stops the alert''s ladders.';

CREATE TABLE alr.escalation_policies (
  id uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
  name text NOT NULL CHECK (name <> ''),
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE alr.escalation_policies IS 'Named ladders of steps; created (validated) by alr.create_policy.';

CREATE TABLE alr.escalation_steps (
  policy_id uuid NOT NULL REFERENCES alr.escalation_policies (id) ON DELETE CASCADE,
  step_idx integer NOT NULL CHECK (step_idx >= 0),
  delay interval NOT NULL CHECK (delay >= interval '0'),
  channel text NOT NULL CHECK (channel <> ''),
  target text NOT NULL CHECK (target <> ''),
  PRIMARY KEY (policy_id, step_idx)
);
COMMENT ON TABLE alr.escalation_steps IS 'The ordered steps of a policy, step_idx 0, 1, 2, ... without gaps.';
COMMENT ON COLUMN alr.escalation_steps.delay IS
  'How long after the previous step (after start_escalation for step 0) this step becomes due.';

CREATE TABLE alr.alert_escalations (
  id uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
  alert_id uuid NOT NULL REFERENCES alr.alerts (id) ON DELETE CASCADE,
  policy_id uuid NOT NULL REFERENCES alr.escalation_policies (id),
  step_idx integer NOT NULL DEFAULT 0 CHECK (step_idx >= 0),
  next_at timestamptz,
  stopped_at timestamptz,
  stop_reason text CHECK (stop_reason IN ('resolved', 'completed')),
  leased_until timestamptz,
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  CHECK ((stopped_at IS NULL) = (stop_reason IS NULL)),
  CHECK (stopped_at IS NULL OR next_at IS NULL)
);
COMMENT ON TABLE alr.alert_escalations IS
  'One running (or finished) ladder of an alert: which step is next and when it is due.';
COMMENT ON COLUMN alr.alert_escalations.step_idx IS
  'Index of the next step to deliver; apply_escalation advances it when it records a delivery.';
COMMENT ON COLUMN alr.alert_escalations.next_at IS
  'When step step_idx is due; NULL once the ladder has stopped.';
COMMENT ON COLUMN alr.alert_escalations.stopped_at IS
  'When the ladder stopped (alert resolved, or its last step recorded); NULL = running.';
COMMENT ON COLUMN alr.alert_escalations.leased_until IS
  'Until when the step is taken into work: while the lease lasts no other instance sees the step.';

-- take_due_steps reads running ladders in next_at order.
CREATE INDEX alert_escalations_due ON alr.alert_escalations (next_at) WHERE stopped_at IS NULL;
CREATE INDEX alert_escalations_alert ON alr.alert_escalations (alert_id);
-- One running ladder per alert and policy: start_escalation is idempotent.
CREATE UNIQUE INDEX alert_escalations_running ON alr.alert_escalations (alert_id, policy_id)
  WHERE stopped_at IS NULL;
