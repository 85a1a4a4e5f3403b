-- acknowledge_alert records who (session_user) acknowledged a firing alert, when, and the note;
-- stops every running ladder of it (stop_reason acknowledged; next_at, lease and token cleared) so a
-- step an engine already took is not recorded; the alert stays firing until resolve_alert; another
-- alert's ladder keeps running; acknowledging again returns false and keeps the first record.
BEGIN;
SELECT plan(9);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT alr.add_alert('cpu') AS alert_id, pg_temp.policy(2) AS p1, pg_temp.policy(1) AS p2,
                               pg_temp.ladder() AS other;
SELECT alr.start_escalation(alert_id, p1), alr.start_escalation(alert_id, p2) FROM fx;
CREATE TEMP TABLE t AS SELECT * FROM alr.take_due_steps();

SELECT is(alr.acknowledge_alert(alert_id, 'on it: ops (via pgdrain web)'), true, 'acknowledging a firing alert returns true')
FROM fx;
SELECT results_eq(format('SELECT acknowledged_at, acknowledged_by, note FROM alr.alert_acknowledgements WHERE alert_id = %L',
                         (SELECT alert_id FROM fx)),
                  $$VALUES (now(), session_user::text COLLATE "default", 'on it: ops (via pgdrain web)'::text)$$,
                  'who (the login role), when and the note are recorded');
SELECT is((SELECT state FROM alr.alerts WHERE id = (SELECT alert_id FROM fx)), 'firing',
          'the alert stays firing until it is resolved');
SELECT set_eq(format('SELECT stopped_at, stop_reason, next_at, leased_until, lease_token FROM alr.alert_escalations WHERE alert_id = %L',
                     (SELECT alert_id FROM fx)),
              $$VALUES (now(), 'acknowledged', NULL::timestamptz, NULL::timestamptz, NULL::uuid),
                       (now(), 'acknowledged', NULL, NULL, NULL)$$,
              'both of its ladders stopped as acknowledged, leases and tokens cleared');
SELECT is((SELECT stopped_at FROM alr.alert_escalations WHERE id = (SELECT other FROM fx)), NULL,
          'another alert''s ladder keeps running');
SELECT is(alr.apply_escalation(t.escalation_id, t.lease_token), false,
          'a step an engine took before the acknowledgement is not recorded (so not delivered)')
FROM t JOIN fx ON t.alert_id = fx.alert_id LIMIT 1;
SELECT ok(NOT EXISTS (SELECT 1 FROM alr.take_due_steps() d JOIN fx ON d.alert_id = fx.alert_id),
          'no further step of it is taken');

INSERT INTO state_before SELECT pg_temp.alr_state() || jsonb_build_object('acks',
  (SELECT jsonb_agg(to_jsonb(k)) FROM alr.alert_acknowledgements k));
SELECT is(alr.acknowledge_alert(alert_id, 'second person'), false, 'acknowledging again returns false')
FROM fx;
SELECT is(pg_temp.alr_state() || jsonb_build_object('acks', (SELECT jsonb_agg(to_jsonb(k)) FROM alr.alert_acknowledgements k)),
          (SELECT state FROM state_before), 'and changes nothing: the first acknowledgement is kept');
SELECT * FROM finish();
ROLLBACK;
