-- The seed's scenario in one session: A takes a step, its lease expires, B retakes it. A's late
-- apply_escalation (stale token) returns false and changes no column — not next_at, not step_idx,
-- not leased_until — so B's lease stands and B's apply is the one that records.
BEGIN;
SELECT plan(8);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(2) AS id;
CREATE TEMP TABLE a AS SELECT * FROM alr.take_due_steps(100, '1 second');
SELECT pg_temp.expire((SELECT id FROM fx));
CREATE TEMP TABLE b AS SELECT * FROM alr.take_due_steps(100, '2 minutes');
SELECT is((SELECT count(*)::int FROM b), 1, 'the expired step is retaken by B');
SELECT isnt((SELECT lease_token FROM b), (SELECT lease_token FROM a), 'B holds a different token than A');

INSERT INTO state_before SELECT pg_temp.row_of((SELECT id FROM fx));
SELECT is(alr.apply_escalation((SELECT escalation_id FROM a), (SELECT lease_token FROM a)), false,
          'A''s late apply with its stale token returns false');
SELECT is(pg_temp.row_of((SELECT id FROM fx)), (SELECT state FROM state_before),
          'the stale apply changed no column of the row (B''s lease and token stand)');
SELECT is(alr.apply_escalation((SELECT id FROM fx), core.new_id()), false, 'a random token returns false');
SELECT is(pg_temp.row_of((SELECT id FROM fx)), (SELECT state FROM state_before),
          'a random token changed no column either');

SELECT is(alr.apply_escalation((SELECT escalation_id FROM b), (SELECT lease_token FROM b)), true,
          'B, whose token is in the row, records the step');
SELECT is(alr.apply_escalation((SELECT escalation_id FROM b), (SELECT lease_token FROM b)), false,
          'the same token cannot record twice: apply cleared it');

SELECT * FROM finish();
ROLLBACK;
