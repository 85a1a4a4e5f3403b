-- The delivery journal fenced by the token (seed 000: a mismatched token touches nothing).
-- apply_escalation clears the lease token when it records a step, so it keeps that token here, one
-- element per step (element step_idx + 1); record_delivery journals the step only with that token and
-- clears the element, so a step gets one journal row, from the take that recorded it. Per step and
-- not one column: the next step may be taken and recorded (a zero delay, another engine) before the
-- delivery of this one is journaled. A step recorded before this migration has no element: its late
-- journal call is refused.
ALTER TABLE alr.alert_escalations ADD COLUMN applied_tokens uuid[];
COMMENT ON COLUMN alr.alert_escalations.applied_tokens IS
  'For each step recorded and not yet journaled (element step_idx + 1), the token of the take whose '
  'apply_escalation recorded it: the only token alr.record_delivery accepts for that step, once (it '
  'then clears the element). NULL elements: not recorded yet, or journaled.';
