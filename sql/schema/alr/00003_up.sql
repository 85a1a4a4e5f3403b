-- The delivery journal: one row per real delivery attempt, written by the engine after it
-- delivered (or failed to). Deliberately no unique key on (escalation_id, step_idx): if a step were
-- ever delivered twice, the journal must show two rows, not hide the second behind a conflict.
CREATE TABLE alr.delivery_journal (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  escalation_id uuid NOT NULL REFERENCES alr.alert_escalations (id) ON DELETE CASCADE,
  alert_id uuid NOT NULL,
  step_idx integer NOT NULL CHECK (step_idx >= 0),
  channel text NOT NULL,
  target text NOT NULL,
  lease_token uuid NOT NULL,
  outcome text NOT NULL CHECK (outcome IN ('delivered', 'failed')),
  error text,
  delivered_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  CHECK ((outcome = 'failed') = (error IS NOT NULL))
);
CREATE INDEX delivery_journal_step ON alr.delivery_journal (escalation_id, step_idx);
COMMENT ON TABLE alr.delivery_journal IS
  'One row per delivery the engine made (record, then deliver, then journal): two rows for one '
  '(escalation_id, step_idx) would mean a step reached someone twice.';
COMMENT ON COLUMN alr.delivery_journal.lease_token IS
  'The token of the take whose apply_escalation returned true: names the take that delivered.';
COMMENT ON COLUMN alr.alert_escalations.stop_reason IS
  'Why the ladder stopped: resolved (resolve_alert) or completed (its last step was recorded).';
