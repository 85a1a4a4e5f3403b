-- acknowledge_alert refuses a note made only of Unicode white space or zero-width characters,
-- whatever the database's ctype (alr 00010: U+3000 and others got through under C): 22023, the
-- alert stays unacknowledged and its ladders run.
BEGIN;
SELECT plan(3);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT alr.add_alert('firing one') AS alert, pg_temp.policy(2) AS p;
SELECT alr.start_escalation(alert, p) FROM fx;
CREATE FUNCTION pg_temp.all_state() RETURNS jsonb LANGUAGE sql AS $$
  SELECT pg_temp.alr_state() || jsonb_build_object('acks', (SELECT jsonb_agg(to_jsonb(k) ORDER BY k.alert_id) FROM alr.alert_acknowledgements k));
$$;
INSERT INTO state_before SELECT pg_temp.all_state();
SELECT throws_ok(format('SELECT alr.acknowledge_alert(%L, %L)', alert, E'\u3000\u2003\u202f\u2060'), '22023',
                 E'acknowledge_alert: note must be NULL or a non-blank text of at most 1000 characters, got \'\u3000\u2003\u202f\u2060\'',
                 'a note of Unicode white space and zero-width characters is rejected') FROM fx;
SELECT is(pg_temp.all_state(), (SELECT state FROM state_before), 'and changes nothing');
SELECT is(alr.acknowledge_alert(alert, E'\u2003on it'), true, 'a note with visible characters is kept') FROM fx;

SELECT * FROM finish();
ROLLBACK;
