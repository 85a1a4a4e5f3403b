-- A blank error over 200 characters is refused with its length, not echoed whole into the error
-- message (and the server log): as add_alert, create_policy and acknowledge_alert show a long text
-- that they refuse. Before, a megabyte of blanks came back in the error. The call changes nothing.
BEGIN;
SELECT plan(2);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(1) AS id;
CREATE TEMP TABLE t AS SELECT * FROM alr.take_due_steps();
SELECT alr.apply_escalation((SELECT escalation_id FROM t), (SELECT lease_token FROM t));
INSERT INTO state_before SELECT pg_temp.alr_state();

SELECT throws_ok(format('SELECT alr.record_delivery(%L, 0, %L, repeat(%L, 1000000))', escalation_id, lease_token, ' '),
  '22023', 'record_delivery: error must be NULL (delivered) or say why the delivery failed, got a blank text of 1000000 characters',
  'a megabyte of blanks is refused with its length')
FROM t;
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'the refused call changed nothing');

SELECT * FROM finish();
ROLLBACK;
