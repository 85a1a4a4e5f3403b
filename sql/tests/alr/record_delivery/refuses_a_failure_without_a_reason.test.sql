-- record_delivery refuses an error that shows nothing (empty, white space, zero-width characters):
-- a failure journaled without its reason tells on call nothing. The refused call changes nothing,
-- and the step can still be journaled with a reason.
BEGIN;
SELECT plan(5);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(1) AS id;
CREATE TEMP TABLE t AS SELECT * FROM alr.take_due_steps();
SELECT alr.apply_escalation((SELECT escalation_id FROM t), (SELECT lease_token FROM t));
INSERT INTO state_before SELECT pg_temp.alr_state();

SELECT throws_ok(format('SELECT alr.record_delivery(%L, 0, %L, %L)', escalation_id, lease_token, ''), '22023',
  'record_delivery: error must be NULL (delivered) or say why the delivery failed, got ''''', 'an empty error is refused')
FROM t;
SELECT throws_ok(format('SELECT alr.record_delivery(%L, 0, %L, %L)', escalation_id, lease_token, E' \t\u200b\u3000'), '22023', NULL,
  'an error of white space and zero-width characters is refused')
FROM t;
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'the refused calls changed nothing');
SELECT isnt(alr.record_delivery(escalation_id, 0, lease_token, 'sms: 503'), NULL, 'journaled with its reason') FROM t;
SELECT is((SELECT error FROM alr.delivery_journal), 'sms: 503', 'the reason is kept');

SELECT * FROM finish();
ROLLBACK;
