-- apply_escalation writes only while the ladder runs and its alert is firing: after resolve_alert
-- (or an alert set to resolved by a plain UPDATE) a holder of a valid token gets false and the row
-- is unchanged.
BEGIN;
SELECT plan(6);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(2) AS id UNION ALL SELECT pg_temp.ladder(2);
CREATE TEMP TABLE t AS SELECT * FROM alr.take_due_steps();
SELECT is((SELECT count(*)::int FROM t), 2, 'both steps are taken');

-- Ladder 1: resolve_alert stops it (mid-batch, while its step is leased).
SELECT alr.resolve_alert((SELECT alert_id FROM t ORDER BY escalation_id LIMIT 1));
INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT is(alr.apply_escalation(t.escalation_id, t.lease_token), false,
          'a step of a resolved alert is not recorded')
FROM (SELECT * FROM t ORDER BY escalation_id LIMIT 1) t;
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'and nothing changed');
SELECT isnt((SELECT stopped_at FROM alr.alert_escalations e JOIN (SELECT * FROM t ORDER BY escalation_id LIMIT 1) t
             ON t.escalation_id = e.id), NULL, 'resolve_alert set stopped_at of the ladder');

-- Ladder 2: the alert is resolved behind the ladder's back (no resolve_alert): still no record.
UPDATE alr.alerts SET state = 'resolved', resolved_at = now()
WHERE id = (SELECT alert_id FROM t ORDER BY escalation_id OFFSET 1);
DELETE FROM state_before;
INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT is(alr.apply_escalation(t.escalation_id, t.lease_token), false,
          'a running ladder of an alert that is no longer firing is not recorded')
FROM (SELECT * FROM t ORDER BY escalation_id OFFSET 1) t;
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'and nothing changed (not even the lease)');

SELECT * FROM finish();
ROLLBACK;
