-- resolve_alert resolves the alert and stops every running ladder of it (next_at, lease and token
-- cleared, stop_reason resolved), leaves other alerts alone, is idempotent; a NULL id is 22023 and
-- an unknown one P0002, changing nothing.
BEGIN;
SELECT plan(8);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT alr.add_alert('cpu') AS alert_id, pg_temp.policy(2) AS p1, pg_temp.policy(1) AS p2,
                               pg_temp.ladder() AS other;
SELECT alr.start_escalation(alert_id, p1), alr.start_escalation(alert_id, p2) FROM fx;
CREATE TEMP TABLE t AS SELECT * FROM alr.take_due_steps();

SELECT alr.resolve_alert(alert_id) FROM fx;
SELECT is((SELECT to_jsonb(a) - 'id' - 'name' - 'created_at' FROM alr.alerts a WHERE id = (SELECT alert_id FROM fx)),
          jsonb_build_object('state', 'resolved', 'resolved_at', now()), 'the alert is resolved');
SELECT set_eq(format('SELECT stopped_at, stop_reason, next_at, leased_until, lease_token FROM alr.alert_escalations WHERE alert_id = %L',
                     (SELECT alert_id FROM fx)),
              $$VALUES (now(), 'resolved', NULL::timestamptz, NULL::timestamptz, NULL::uuid),
                       (now(), 'resolved', NULL, NULL, NULL)$$,
              'both of its ladders stopped, leases and tokens cleared');
SELECT is((SELECT stopped_at FROM alr.alert_escalations WHERE id = (SELECT other FROM fx)), NULL,
          'another alert''s ladder keeps running');
SELECT is(alr.apply_escalation(t.escalation_id, t.lease_token), false, 'a later apply of its taken step returns false')
FROM t JOIN fx ON t.alert_id = fx.alert_id LIMIT 1;

INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT lives_ok(format('SELECT alr.resolve_alert(%L)', (SELECT alert_id FROM fx)), 'resolving again is fine');
SELECT throws_ok('SELECT alr.resolve_alert(NULL)', '22023', 'resolve_alert: alert_id must not be NULL, got NULL',
                 'a NULL alert_id is rejected');
SELECT throws_ok('SELECT alr.resolve_alert(''00000000-0000-0000-0000-000000000005'')', 'P0002',
                 'resolve_alert: alert_id must name an existing alert, got 00000000-0000-0000-0000-000000000005',
                 'an unknown alert is P0002');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before),
          'the second resolve and the rejected calls changed nothing');
SELECT * FROM finish();
ROLLBACK;
