-- A step recorded and never journaled is listed while its alert still fires and nobody acknowledged
-- it: on call is told to page its target by hand if the alert still matters, then to acknowledge or
-- resolve it, and that takes the step off the list. Before, nothing but record_delivery with the
-- step's own token (held by an engine that was killed) took it off: the engines'
-- pgdrain_escalation_unjournaled_steps and its page (PgdrainEscalationStepsNeverJournaled) stayed
-- up for ever after the alert was resolved. Acknowledging or resolving also takes the ladder off the
-- partial index the list reads (unjournaled_since cleared): kept there, every step ever left
-- unjournaled made each read longer. The step's token stays: a late journal is still taken.
BEGIN;
SELECT plan(8);
\ir ../_fixtures.sql

-- Two ladders, each with a step recorded and never journaled (an engine killed after the record).
CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(2) AS id, 'acknowledged' AS who
                        UNION ALL SELECT pg_temp.ladder(2), 'resolved';
CREATE TEMP TABLE t1 AS SELECT * FROM alr.take_due_steps();
SELECT is((SELECT count(*)::int FROM t1 WHERE alr.apply_escalation(escalation_id, lease_token)), 2, 'both steps recorded');
SELECT is((SELECT count(*)::int FROM alr.unjournaled_steps(interval '0')), 2, 'both are listed');

SELECT ok(alr.acknowledge_alert((SELECT alert_id FROM alr.alert_escalations
                                 WHERE id = (SELECT id FROM fx WHERE who = 'acknowledged'))), 'one alert acknowledged');
SELECT results_eq($$SELECT escalation_id FROM alr.unjournaled_steps(interval '0')$$,
  $$SELECT id FROM fx WHERE who = 'resolved'$$, 'the acknowledged alert''s step is listed no more');

SELECT alr.resolve_alert((SELECT alert_id FROM alr.alert_escalations WHERE id = (SELECT id FROM fx WHERE who = 'resolved')));
SELECT is_empty($$SELECT * FROM alr.unjournaled_steps(interval '0')$$, 'nor the resolved alert''s');
SELECT is((SELECT count(*)::int FROM alr.alert_escalations WHERE unjournaled_since IS NOT NULL), 0,
          'both ladders left the partial index of unjournaled steps');
SELECT is((SELECT count(*)::int FROM alr.alert_escalations e, unnest(e.applied_tokens) t WHERE t IS NOT NULL), 2,
          'their steps'' tokens are kept');
SELECT isnt((SELECT alr.record_delivery(t1.escalation_id, 0, t1.lease_token, NULL)
             FROM t1 JOIN fx ON fx.id = t1.escalation_id WHERE fx.who = 'resolved'), NULL,
            'a late journal of the resolved alert''s step is still taken');

SELECT * FROM finish();
ROLLBACK;
