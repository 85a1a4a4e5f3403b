-- Module alr as of release 0.1.0: every table, index, constraint, comment and role the
-- development history (sql/history/alr, 00001..) leaves behind, written as its final form. The
-- functions come from sql/functions/core and sql/functions/alr, the grants from
-- sql/privileges/alr.sql (scripts/fold-baseline.sh puts them together; gocheck
-- TestBaseline_EqualsTheHistory proves the result equals the history).

-- The four roles of pgdrain (cluster-wide, NOLOGIN), created only when missing: the same statement
-- as module outbox's, because a service may migrate module alr without module outbox. A DBA may
-- create them beforehand when the migrating role lacks CREATEROLE; a concurrent creator simply wins.
DO $roles$
DECLARE
  v_role text;
BEGIN
  FOREACH v_role IN ARRAY ARRAY['pgdrain_worker', 'pgdrain_producer', 'pgdrain_operator', 'pgdrain_reader'] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = v_role) THEN
      BEGIN
        EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
      END;
    END IF;
  END LOOP;
END
$roles$;

-- A database migrated during development to a migration before 00006 has schema alr but not
-- this migration: it must apply the rest of that history first, then it is at 00006 like this one.
DO $guard$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = 'alr') THEN
    RAISE EXCEPTION 'schema alr exists already: a database migrated before alr 00006 (0.1.0) applies the rest of sql/history/alr first (docs/install.md)'
      USING ERRCODE = '42P06';
  END IF;
END
$guard$;

-- core: tiny shared helpers (core.new_id); may be shared by other modules, hence IF NOT EXISTS.
CREATE SCHEMA IF NOT EXISTS core;
CREATE SCHEMA alr;
COMMENT ON SCHEMA alr IS 'pgdrain: alert escalation ladder (due steps leased in batches, record then deliver)';

CREATE TABLE alr.alerts (
  id uuid CONSTRAINT alerts_pkey PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
  name text NOT NULL CONSTRAINT alerts_name_check CHECK (name <> ''),
  state text NOT NULL DEFAULT 'firing' CONSTRAINT alerts_state_check CHECK (state IN ('firing', 'resolved')),
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  resolved_at timestamptz,
  CONSTRAINT alerts_check CHECK ((state = 'resolved') = (resolved_at IS NOT NULL))
);
COMMENT ON TABLE alr.alerts IS
  'Alerts that escalate. Insert with alr.add_alert(name) or a plain INSERT (state defaults to firing); '
  'resolve with alr.resolve_alert, which also stops the alert''s ladders.';
-- The recently resolved alerts, newest first (alr.resolved_alerts): the scan stops after the rows shown.
CREATE INDEX alerts_resolved ON alr.alerts (resolved_at DESC, id DESC) WHERE state = 'resolved';

CREATE TABLE alr.escalation_policies (
  id uuid CONSTRAINT escalation_policies_pkey PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
  name text NOT NULL CONSTRAINT escalation_policies_name_check CHECK (name <> ''),
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE alr.escalation_policies IS 'Named ladders of steps; created (validated) by alr.create_policy.';

CREATE TABLE alr.escalation_steps (
  policy_id uuid NOT NULL
    CONSTRAINT escalation_steps_policy_id_fkey REFERENCES alr.escalation_policies (id) ON DELETE CASCADE,
  step_idx integer NOT NULL CONSTRAINT escalation_steps_step_idx_check CHECK (step_idx >= 0),
  delay interval NOT NULL CONSTRAINT escalation_steps_delay_check CHECK (delay >= interval '0'),
  channel text NOT NULL CONSTRAINT escalation_steps_channel_check CHECK (channel <> ''),
  target text NOT NULL CONSTRAINT escalation_steps_target_check CHECK (target <> ''),
  CONSTRAINT escalation_steps_pkey PRIMARY KEY (policy_id, step_idx)
);
COMMENT ON TABLE alr.escalation_steps IS 'The ordered steps of a policy, step_idx 0, 1, 2, ... without gaps.';
COMMENT ON COLUMN alr.escalation_steps.delay IS
  'How long after the previous step (after start_escalation for step 0) this step becomes due.';

-- One running (or finished) ladder of an alert. A step is leased (leased_until) with a fencing
-- token (lease_token): a lease is a deadline, the token is ownership. Processing a batch can take
-- longer than the lease, so apply_escalation records a step only when the token still matches
-- (and the ladder runs and the alert fires); a mismatch touches nothing, and the engine then
-- delivers nothing. A token per row, not per batch (core.new_id() in the SET runs per row): two
-- runs that split one batch differ by more than chance, and the row names which take holds it.
-- NULL = nobody holds the step; there is deliberately no NOT NULL.
CREATE TABLE alr.alert_escalations (
  id uuid CONSTRAINT alert_escalations_pkey PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
  alert_id uuid NOT NULL
    CONSTRAINT alert_escalations_alert_id_fkey REFERENCES alr.alerts (id) ON DELETE CASCADE,
  policy_id uuid NOT NULL
    CONSTRAINT alert_escalations_policy_id_fkey REFERENCES alr.escalation_policies (id),
  step_idx integer NOT NULL DEFAULT 0 CONSTRAINT alert_escalations_step_idx_check CHECK (step_idx >= 0),
  next_at timestamptz,
  stopped_at timestamptz,
  stop_reason text
    CONSTRAINT alert_escalations_stop_reason_check CHECK (stop_reason IN ('resolved', 'completed', 'acknowledged')),
  leased_until timestamptz,
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  lease_token uuid,
  CONSTRAINT alert_escalations_check CHECK ((stopped_at IS NULL) = (stop_reason IS NULL)),
  CONSTRAINT alert_escalations_check1 CHECK (stopped_at IS NULL OR next_at IS NULL)
);
COMMENT ON TABLE alr.alert_escalations IS
  'One running (or finished) ladder of an alert: which step is next and when it is due.';
COMMENT ON COLUMN alr.alert_escalations.step_idx IS
  'Index of the next step to deliver; apply_escalation advances it when it records a delivery.';
COMMENT ON COLUMN alr.alert_escalations.next_at IS
  'When step step_idx is due; NULL once the ladder has stopped.';
COMMENT ON COLUMN alr.alert_escalations.stopped_at IS
  'When the ladder stopped (alert resolved, or its last step recorded); NULL = running.';
COMMENT ON COLUMN alr.alert_escalations.stop_reason IS
  'Why the ladder stopped: resolved (resolve_alert), completed (its last step was recorded) or '
  'acknowledged (acknowledge_alert: someone is on it, no further step).';
COMMENT ON COLUMN alr.alert_escalations.leased_until IS
  'Until when the step counts as taken into work. A deadline, not ownership: ownership is proven '
  'by lease_token.';
COMMENT ON COLUMN alr.alert_escalations.lease_token IS
  'Token of the current lease (fencing). Set together with leased_until when the step is taken, '
  'checked when the decision is recorded and cleared together with the lease. NULL = nobody holds '
  'the step now. Needed because processing a batch can take longer than the lease: without an '
  'ownership check a late instance would deliver a step already delivered by the one that retook '
  'it after the lease expired.';
-- take_due_steps reads running ladders in next_at order.
CREATE INDEX alert_escalations_due ON alr.alert_escalations (next_at) WHERE stopped_at IS NULL;
CREATE INDEX alert_escalations_alert ON alr.alert_escalations (alert_id);
-- One running ladder per alert and policy: start_escalation is idempotent.
CREATE UNIQUE INDEX alert_escalations_running ON alr.alert_escalations (alert_id, policy_id)
  WHERE stopped_at IS NULL;

-- The delivery journal: one row per real delivery attempt, written by the engine after it
-- delivered (or failed to). Deliberately no unique key on (escalation_id, step_idx): if a step were
-- ever delivered twice, the journal must show two rows, not hide the second behind a conflict.
CREATE TABLE alr.delivery_journal (
  id bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT delivery_journal_pkey PRIMARY KEY,
  escalation_id uuid NOT NULL
    CONSTRAINT delivery_journal_escalation_id_fkey REFERENCES alr.alert_escalations (id) ON DELETE CASCADE,
  alert_id uuid NOT NULL,
  step_idx integer NOT NULL CONSTRAINT delivery_journal_step_idx_check CHECK (step_idx >= 0),
  channel text NOT NULL,
  target text NOT NULL,
  lease_token uuid NOT NULL,
  outcome text NOT NULL CONSTRAINT delivery_journal_outcome_check CHECK (outcome IN ('delivered', 'failed')),
  error text,
  delivered_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  CONSTRAINT delivery_journal_check CHECK ((outcome = 'failed') = (error IS NOT NULL))
);
CREATE INDEX delivery_journal_step ON alr.delivery_journal (escalation_id, step_idx);
COMMENT ON TABLE alr.delivery_journal IS
  'One row per delivery the engine made (record, then deliver, then journal): two rows for one '
  '(escalation_id, step_idx) would mean a step reached someone twice.';
COMMENT ON COLUMN alr.delivery_journal.lease_token IS
  'The token of the take whose apply_escalation returned true: names the take that delivered.';

-- Acknowledgement: someone on call has taken an alert. alr.acknowledge_alert writes one row here
-- per alert (the first acknowledgement is kept) and stops the alert's running ladders with
-- stop_reason 'acknowledged', so no further step pages anyone; the alert stays firing until
-- resolve_alert. Written only by acknowledge_alert (SECURITY DEFINER); read by the console.
CREATE TABLE alr.alert_acknowledgements (
  alert_id uuid CONSTRAINT alert_acknowledgements_pkey PRIMARY KEY
    CONSTRAINT alert_acknowledgements_alert_id_fkey REFERENCES alr.alerts (id) ON DELETE CASCADE,
  acknowledged_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  acknowledged_by text NOT NULL DEFAULT session_user,
  note text CONSTRAINT alert_acknowledgements_note_check
    CHECK (note IS NULL OR (pg_catalog.btrim(note) <> '' AND pg_catalog.length(note) <= 1000))
);
COMMENT ON TABLE alr.alert_acknowledgements IS
  'Who acknowledged a firing alert and when (alr.acknowledge_alert): its ladders stopped, it stays firing until resolved.';
COMMENT ON COLUMN alr.alert_acknowledgements.acknowledged_by IS
  'The login role that acknowledged (session_user); a shared login (a console) names the person in note.';
