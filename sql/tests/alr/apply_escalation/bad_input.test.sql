-- apply_escalation: NULL escalation_id or lease_token is an error (22023; a NULL token means "free",
-- which no caller holds), an unknown escalation is P0002; a row with a NULL token (free) is never
-- recorded by any token. Every rejected call changes nothing.
BEGIN;
SELECT plan(6);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder() AS id;
INSERT INTO state_before SELECT pg_temp.alr_state();

SELECT throws_ok(format('SELECT alr.apply_escalation(%L, NULL)', (SELECT id FROM fx)), '22023',
                 'apply_escalation: lease_token must not be NULL, got NULL', 'a NULL token is an error');
SELECT throws_ok(format('SELECT alr.apply_escalation(NULL, %L)', core.new_id()), '22023',
                 'apply_escalation: escalation_id must not be NULL, got NULL', 'a NULL escalation_id is an error');
SELECT throws_ok('SELECT alr.apply_escalation(''00000000-0000-0000-0000-000000000001'', core.new_id())', 'P0002',
                 'apply_escalation: escalation_id must name an existing escalation, got 00000000-0000-0000-0000-000000000001',
                 'an unknown escalation is P0002');
SELECT is(alr.apply_escalation((SELECT id FROM fx), core.new_id()), false,
          'a free row (NULL token) is recorded by no token');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'none of these calls changed anything');
SELECT is((SELECT lease_token FROM alr.alert_escalations WHERE id = (SELECT id FROM fx)), NULL,
          'a started ladder is free: NULL token');

SELECT * FROM finish();
ROLLBACK;
