-- record_delivery journals one delivery of a step apply_escalation recorded, reading channel,
-- target and alert from the ladder; error NULL = delivered. A ladder its last step stopped is still
-- journaled. It refuses a step not yet recorded, NULL ids/tokens, unknown ids (refusing a token is
-- record_delivery/refuses_a_token_that_did_not_record_the_step.test.sql).
BEGIN;
SELECT plan(10);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(2) AS id, 1 AS n
  UNION ALL SELECT pg_temp.ladder(1), 2 UNION ALL SELECT pg_temp.ladder(1), 3;
CREATE TEMP TABLE t AS SELECT fx.n, s.* FROM alr.take_due_steps() s JOIN fx ON fx.id = s.escalation_id;
SELECT alr.apply_escalation(escalation_id, lease_token) FROM t;

SELECT isnt(alr.record_delivery(escalation_id, 0, lease_token), NULL, 'a recorded step is journaled') FROM t WHERE n = 1;
SELECT results_eq('SELECT escalation_id, alert_id, step_idx, channel, target, lease_token, outcome, error FROM alr.delivery_journal',
                  'SELECT escalation_id, alert_id, 0, ''telegram''::text, ''@oncall''::text, lease_token, ''delivered''::text, NULL::text FROM t WHERE n = 1',
                  'the journal row names the ladder, alert, step, channel, target and the take that delivered');
SELECT isnt(alr.record_delivery(escalation_id, 0, lease_token, 'telegram: 502 Bad Gateway'), NULL,
            'the last step of a ladder it stopped is journaled') FROM t WHERE n = 2;
SELECT is((SELECT outcome || ': ' || error FROM alr.delivery_journal ORDER BY id DESC LIMIT 1),
          'failed: telegram: 502 Bad Gateway', 'an error is journaled as failed');

SELECT alr.record_delivery(escalation_id, 0, lease_token, 'é' || repeat('x', 100000)) FROM t WHERE n = 3;
SELECT is((SELECT length(error) FROM alr.delivery_journal ORDER BY id DESC LIMIT 1), 4000,
          'an error is journaled to its first 4000 characters (alr 00008: a whole error page could be megabytes)');

CREATE TEMP TABLE fresh AS SELECT pg_temp.ladder(1) AS id;
INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT throws_ok(format('SELECT alr.record_delivery(%L, 1, %L)', escalation_id, lease_token), '22023',
                 'record_delivery: step_idx must be a step apply_escalation already recorded (0 to 0), got 1',
                 'a step not yet recorded cannot be journaled') FROM t WHERE n = 1;
SELECT throws_ok(format('SELECT alr.record_delivery(%L, 0, core.new_id())', id), '22023',
                 'record_delivery: step_idx must be a step apply_escalation already recorded (none yet), got 0',
                 'on a ladder with no step recorded yet the error says so (alr 00010; it said "0 to -1")') FROM fresh;
SELECT throws_ok(format('SELECT alr.record_delivery(%L, 0, NULL)', escalation_id), '22023',
                 'record_delivery: lease_token must not be NULL, got NULL', 'a NULL token is rejected') FROM t WHERE n = 1;
SELECT throws_ok('SELECT alr.record_delivery(''00000000-0000-0000-0000-000000000006'', 0, core.new_id())', 'P0002',
                 'record_delivery: escalation_id must name an existing escalation, got 00000000-0000-0000-0000-000000000006',
                 'an unknown escalation is P0002');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'the rejected calls journaled nothing');

SELECT * FROM finish();
ROLLBACK;
