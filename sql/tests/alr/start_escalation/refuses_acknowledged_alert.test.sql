-- start_escalation refuses an acknowledged alert (22023 naming alert_id), as it refuses a resolved
-- one: someone is on it, and a new ladder would page again. Nothing changes.
BEGIN;
SELECT plan(2);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT alr.add_alert('cpu') AS alert_id, pg_temp.policy(1) AS p1, pg_temp.policy(2) AS p2;
SELECT alr.start_escalation(alert_id, p1) FROM fx;
SELECT alr.acknowledge_alert(alert_id) FROM fx;
INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT throws_ok(format('SELECT alr.start_escalation(%L, %L)', alert_id, p2), '22023',
                 format('start_escalation: alert_id must name an alert nobody acknowledged, got %s (acknowledged)', alert_id),
                 'an acknowledged alert starts no ladder')
FROM fx;
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'and nothing changed');
SELECT * FROM finish();
ROLLBACK;
