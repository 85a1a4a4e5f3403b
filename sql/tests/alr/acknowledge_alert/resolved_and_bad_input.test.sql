-- acknowledge_alert on a resolved alert returns false and changes nothing; resolving an acknowledged
-- alert resolves it. A NULL alert_id or a blank or over-long note is 22023, an unknown alert P0002,
-- each naming the argument and changing nothing.
BEGIN;
SELECT plan(8);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT alr.add_alert('resolved one') AS resolved, alr.add_alert('acked one') AS acked,
                               pg_temp.policy(2) AS p;
SELECT alr.start_escalation(resolved, p), alr.start_escalation(acked, p) FROM fx;
SELECT alr.resolve_alert(resolved) FROM fx;
SELECT alr.acknowledge_alert(acked) FROM fx;

CREATE FUNCTION pg_temp.all_state() RETURNS jsonb LANGUAGE sql AS $$
  SELECT pg_temp.alr_state() || jsonb_build_object('acks', (SELECT jsonb_agg(to_jsonb(k) ORDER BY k.alert_id) FROM alr.alert_acknowledgements k));
$$;
INSERT INTO state_before SELECT pg_temp.all_state();
SELECT is(alr.acknowledge_alert(resolved), false, 'a resolved alert is not acknowledged') FROM fx;
SELECT throws_ok('SELECT alr.acknowledge_alert(NULL)', '22023', 'acknowledge_alert: alert_id must not be NULL, got NULL',
                 'a NULL alert_id is rejected');
SELECT throws_ok('SELECT alr.acknowledge_alert(''00000000-0000-0000-0000-000000000005'')', 'P0002',
                 'acknowledge_alert: alert_id must name an existing alert, got 00000000-0000-0000-0000-000000000005',
                 'an unknown alert is P0002');
SELECT throws_ok(format('SELECT alr.acknowledge_alert(%L, %L)', (SELECT acked FROM fx), '  '), '22023',
                 'acknowledge_alert: note must be NULL or a non-blank text of at most 1000 characters, got ''  ''',
                 'a blank note is rejected');
SELECT throws_ok(format('SELECT alr.acknowledge_alert(%L, %L)', (SELECT acked FROM fx), repeat('x', 1001)), '22023',
                 'acknowledge_alert: note must be NULL or a non-blank text of at most 1000 characters, got 1001 characters',
                 'a note over 1000 characters is rejected');
SELECT is(pg_temp.all_state(), (SELECT state FROM state_before), 'none of these changed anything');

SELECT alr.resolve_alert(acked) FROM fx;
SELECT results_eq(format('SELECT a.state, k.alert_id IS NOT NULL FROM alr.alerts a LEFT JOIN alr.alert_acknowledgements k ON k.alert_id = a.id WHERE a.id = %L',
                         (SELECT acked FROM fx)),
                  $$VALUES ('resolved'::text, true)$$, 'an acknowledged alert resolves, its acknowledgement kept as history');
SELECT is((SELECT stop_reason FROM alr.alert_escalations WHERE alert_id = (SELECT acked FROM fx)), 'acknowledged',
          'its ladder keeps the reason it stopped');
SELECT * FROM finish();
ROLLBACK;
