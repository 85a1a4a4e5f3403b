-- record_delivery journals one delivery of a step apply_escalation recorded, reading channel,
-- target and alert from the ladder; error NULL = delivered. Every call adds a row (no unique key:
-- a second delivery would show). It refuses a step not yet recorded, NULL ids/tokens, unknown ids.
BEGIN;
SELECT plan(9);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(2) AS id;
CREATE TEMP TABLE t AS SELECT * FROM alr.take_due_steps();
SELECT alr.apply_escalation(escalation_id, lease_token) FROM t;

SELECT isnt(alr.record_delivery(escalation_id, 0, lease_token), NULL, 'a recorded step is journaled') FROM t;
SELECT results_eq(format('SELECT escalation_id, alert_id, step_idx, channel, target, lease_token, outcome, error FROM alr.delivery_journal'),
                  'SELECT escalation_id, alert_id, 0, ''telegram''::text, ''@oncall''::text, lease_token, ''delivered''::text, NULL::text FROM t',
                  'the journal row names the ladder, alert, step, channel, target and the take that delivered');
SELECT alr.record_delivery(escalation_id, 0, lease_token, 'telegram: 502 Bad Gateway') FROM t;
SELECT is((SELECT count(*)::int FROM alr.delivery_journal WHERE escalation_id = (SELECT id FROM fx) AND step_idx = 0), 2,
          'a second journal row for one step is kept, so a double delivery would be visible');
SELECT is((SELECT outcome || ': ' || error FROM alr.delivery_journal ORDER BY id DESC LIMIT 1),
          'failed: telegram: 502 Bad Gateway', 'an error is journaled as failed');

SELECT alr.record_delivery(escalation_id, 0, lease_token, 'é' || repeat('x', 100000)) FROM t;
SELECT is((SELECT length(error) FROM alr.delivery_journal ORDER BY id DESC LIMIT 1), 4000,
          'an error is journaled to its first 4000 characters (alr 00008: a whole error page could be megabytes)');

INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT throws_ok(format('SELECT alr.record_delivery(%L, 1, %L)', escalation_id, lease_token), '22023',
                 'record_delivery: step_idx must be a step apply_escalation already recorded (0 to 0), got 1',
                 'a step not yet recorded cannot be journaled') FROM t;
SELECT throws_ok(format('SELECT alr.record_delivery(%L, 0, NULL)', escalation_id), '22023',
                 'record_delivery: lease_token must not be NULL, got NULL', 'a NULL token is rejected') FROM t;
SELECT throws_ok('SELECT alr.record_delivery(''00000000-0000-0000-0000-000000000006'', 0, core.new_id())', 'P0002',
                 'record_delivery: escalation_id must name an existing escalation, got 00000000-0000-0000-0000-000000000006',
                 'an unknown escalation is P0002');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'the rejected calls journaled nothing');

SELECT * FROM finish();
ROLLBACK;
