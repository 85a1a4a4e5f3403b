-- take_due_steps leases a batch and gives every row its own fresh token (core.new_id() per row),
-- stores exactly what it returns, and does not hand out a leased step again while the lease lasts.
BEGIN;
SELECT plan(8);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder() AS id FROM generate_series(1, 5);
CREATE TEMP TABLE taken AS SELECT * FROM alr.take_due_steps();

SELECT is((SELECT count(*)::int FROM taken), 5, 'take_due_steps takes every due step');
SELECT is((SELECT count(DISTINCT lease_token)::int FROM taken WHERE lease_token IS NOT NULL), 5,
          'every row of one batch gets its own, non-NULL token');
SELECT set_eq('SELECT escalation_id, lease_token, leased_until FROM taken',
              'SELECT id, lease_token, leased_until FROM alr.alert_escalations',
              'each row stores the token and lease the take returned');
SELECT ok((SELECT count(DISTINCT leased_until) = 1 AND min(leased_until) BETWEEN now() + interval '2 minutes'
                                                    AND clock_timestamp() + interval '2 minutes' FROM taken),
          'the default lease is 2 minutes, from the clock, the same for the whole take');
SELECT results_eq('SELECT step_idx, channel, target FROM taken',
                  $$VALUES (0, 'telegram', '@oncall'), (0, 'telegram', '@oncall'), (0, 'telegram', '@oncall'),
                           (0, 'telegram', '@oncall'), (0, 'telegram', '@oncall')$$,
                  'a taken step carries its step index, channel and target');
SELECT is_empty('SELECT * FROM alr.take_due_steps()', 'a step is not taken again while its lease lasts');

UPDATE alr.alert_escalations SET leased_until = NULL, lease_token = NULL;
SELECT is((SELECT count(*)::int FROM alr.take_due_steps(2, '10 seconds')), 2, 'batch_size bounds a take');
SELECT is((SELECT count(*)::int FROM alr.alert_escalations
           WHERE leased_until BETWEEN now() + interval '10 seconds' AND clock_timestamp() + interval '10 seconds'
             AND lease_token IS NOT NULL), 2, 'only the rows returned are leased, for the given lease');

SELECT * FROM finish();
ROLLBACK;
