-- resolved_alerts lists resolved alerts newest first, at most max_rows, with who acknowledged each
-- (NULL when nobody did) and how many steps were delivered; firing alerts are not listed. max_rows
-- outside 1..1000 or NULL is 22023.
BEGIN;
SELECT plan(5);
\ir ../_fixtures.sql
DELETE FROM alr.alert_acknowledgements;
DELETE FROM alr.alerts;

CREATE TEMP TABLE fx AS SELECT alr.add_alert('old') AS old, alr.add_alert('acked') AS acked,
                               alr.add_alert('still firing') AS firing, pg_temp.policy(2) AS p;
SELECT alr.start_escalation(acked, p) FROM fx;
-- Step 0 of "acked" is delivered and journaled, then it is acknowledged and resolved.
SELECT alr.apply_escalation(t.escalation_id, t.lease_token), alr.record_delivery(t.escalation_id, t.step_idx, t.lease_token)
FROM alr.take_due_steps() t;
SELECT alr.acknowledge_alert(acked, 'ops') FROM fx;
SELECT alr.resolve_alert(old), alr.resolve_alert(acked) FROM fx;
UPDATE alr.alerts SET resolved_at = now() - interval '1 hour' WHERE id = (SELECT old FROM fx);

SELECT results_eq(
  'SELECT name, acknowledged_at, acknowledged_by, note, resolved_at, steps_delivered FROM alr.resolved_alerts()',
  $$VALUES ('acked'::text, now(), session_user::text COLLATE "default", 'ops'::text, now(), 1::bigint),
           ('old', NULL::timestamptz, NULL::text, NULL::text, now() - interval '1 hour', 0::bigint)$$,
  'resolved alerts, newest first, with their acknowledgement and delivered steps; firing ones not listed');
SELECT results_eq('SELECT name FROM alr.resolved_alerts(1)', $$VALUES ('acked'::text)$$, 'at most max_rows');
SELECT throws_ok('SELECT * FROM alr.resolved_alerts(0)', '22023', 'resolved_alerts: max_rows must be between 1 and 1000, got 0',
                 'max_rows 0 is rejected');
SELECT throws_ok('SELECT * FROM alr.resolved_alerts(NULL)', '22023', 'resolved_alerts: max_rows must be between 1 and 1000, got NULL',
                 'max_rows NULL is rejected');
SELECT is(pg_get_indexdef('alr.alerts_resolved'::regclass),
          'CREATE INDEX alerts_resolved ON alr.alerts USING btree (resolved_at DESC, id DESC) WHERE (state = ''resolved''::text)',
          'resolved alerts are read newest first through a partial index');
SELECT * FROM finish();
ROLLBACK;
