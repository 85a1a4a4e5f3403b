-- record_delivery is fenced by the token (alr 00010, seed 000: a mismatched token touches nothing):
-- it journals a step only with the token of the take whose apply_escalation recorded that step, and
-- only once. A token no take had, the all-zero one, the token of a take whose apply was refused, the
-- token of another step, and the right token a second time all return NULL and change nothing. Each
-- step keeps its own token: step 0 is still journaled after step 1 was recorded.
BEGIN;
SELECT plan(11);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(3) AS id;
-- Step 0: taken and recorded by take a.
CREATE TEMP TABLE a AS SELECT * FROM alr.take_due_steps();
SELECT alr.apply_escalation(escalation_id, lease_token) FROM a;
-- Step 1 comes due: take b lets its lease run out, take c retakes and records it; b's apply is refused.
UPDATE alr.alert_escalations SET next_at = now() - interval '1 second' WHERE id = (SELECT id FROM fx);
CREATE TEMP TABLE b AS SELECT * FROM alr.take_due_steps();
SELECT pg_temp.expire(id) FROM fx;
CREATE TEMP TABLE c AS SELECT * FROM alr.take_due_steps();
SELECT is((SELECT alr.apply_escalation(escalation_id, lease_token) FROM b), false, 'the late take b records nothing');
SELECT is((SELECT alr.apply_escalation(escalation_id, lease_token) FROM c), true, 'take c records step 1');

INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT is(alr.record_delivery(id, 0, core.new_id()), NULL, 'a token no take had is refused') FROM fx;
SELECT is(alr.record_delivery(id, 0, '00000000-0000-0000-0000-000000000000'), NULL, 'the all-zero token is refused') FROM fx;
SELECT is(alr.record_delivery(escalation_id, 1, lease_token), NULL, 'the token of the take whose apply was refused is refused') FROM b;
SELECT is(alr.record_delivery(escalation_id, 0, lease_token), NULL, 'the token that recorded step 1 does not journal step 0') FROM c;
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'the refused calls changed nothing');

SELECT isnt(alr.record_delivery(escalation_id, 0, lease_token), NULL,
            'the take that recorded step 0 journals it, also after step 1 was recorded') FROM a;
SELECT isnt(alr.record_delivery(escalation_id, 1, lease_token, 'sms: timeout'), NULL, 'the take that recorded step 1 journals it') FROM c;
SELECT is(alr.record_delivery(escalation_id, 0, lease_token), NULL, 'the same take a second time is refused') FROM a;
SELECT results_eq('SELECT step_idx, lease_token, outcome FROM alr.delivery_journal ORDER BY id',
                  'SELECT 0, lease_token, ''delivered''::text FROM a UNION ALL SELECT 1, lease_token, ''failed''::text FROM c',
                  'one journal row per step, each from the take that recorded it');

SELECT * FROM finish();
ROLLBACK;
