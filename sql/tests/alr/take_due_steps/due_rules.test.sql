-- What take_due_steps takes: only running ladders whose next_at has passed and whose lease is free
-- (NULL token) or expired — an expired lease is retaken with a new token. Order: next_at, id.
BEGIN;
SELECT plan(8);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx(name text, id uuid);
INSERT INTO fx VALUES ('due', pg_temp.ladder()), ('later', pg_temp.ladder()), ('stopped', pg_temp.ladder()),
                      ('leased', pg_temp.ladder()), ('expired', pg_temp.ladder()), ('legacy', pg_temp.ladder()),
                      ('resolved', pg_temp.ladder());
UPDATE alr.alert_escalations SET next_at = now() + interval '1 second' WHERE id = (SELECT id FROM fx WHERE name = 'later');
UPDATE alr.alert_escalations SET next_at = now() - interval '1 minute' WHERE id = (SELECT id FROM fx WHERE name = 'expired');
UPDATE alr.alert_escalations SET next_at = NULL, stopped_at = now(), stop_reason = 'completed'
WHERE id = (SELECT id FROM fx WHERE name = 'stopped');
UPDATE alr.alert_escalations SET leased_until = now() + interval '1 minute', lease_token = core.new_id()
WHERE id = (SELECT id FROM fx WHERE name = 'leased');
UPDATE alr.alert_escalations SET leased_until = now() - interval '1 second', lease_token = core.new_id()
WHERE id = (SELECT id FROM fx WHERE name = 'expired');
-- A lease taken before migration 00002: leased_until live, no token.
UPDATE alr.alert_escalations SET leased_until = now() + interval '1 minute'
WHERE id = (SELECT id FROM fx WHERE name = 'legacy');
SELECT alr.resolve_alert(alert_id) FROM alr.alert_escalations WHERE id = (SELECT id FROM fx WHERE name = 'resolved');
CREATE TEMP TABLE old_token AS SELECT lease_token FROM alr.alert_escalations WHERE id = (SELECT id FROM fx WHERE name = 'expired');

CREATE TEMP TABLE taken AS SELECT t.*, row_number() OVER () AS pos FROM alr.take_due_steps() t;
SELECT results_eq('SELECT f.name FROM taken t JOIN fx f ON f.id = t.escalation_id ORDER BY t.pos',
                  $$VALUES ('expired'), ('due')$$,
                  'only due, running, free or expired steps are taken, oldest next_at first');
SELECT isnt((SELECT lease_token FROM taken t JOIN fx f ON f.id = t.escalation_id AND f.name = 'expired'),
            (SELECT lease_token FROM old_token), 'an expired lease is retaken with a new token');
SELECT isnt((SELECT lease_token FROM taken t JOIN fx f ON f.id = t.escalation_id AND f.name = 'expired'),
            NULL, 'the retaken step has a token');
SELECT is((SELECT leased_until FROM alr.alert_escalations WHERE id = (SELECT id FROM fx WHERE name = 'leased')),
          now() + interval '1 minute', 'a live lease is left alone');
SELECT is((SELECT lease_token FROM alr.alert_escalations WHERE id = (SELECT id FROM fx WHERE name = 'legacy')),
          NULL, 'a live pre-token lease keeps its NULL token until it expires');

-- The legacy lease runs out: the next take gives it a token (NULL = free once the deadline passed).
SELECT pg_temp.expire((SELECT id FROM fx WHERE name = 'legacy'));
CREATE TEMP TABLE taken2 AS SELECT * FROM alr.take_due_steps();
SELECT is((SELECT count(*)::int FROM taken2), 1, 'the expired pre-token lease is taken on the next take');
SELECT isnt((SELECT lease_token FROM taken2), NULL, 'and gets a token there');
SELECT is((SELECT lease_token FROM alr.alert_escalations WHERE id = (SELECT id FROM fx WHERE name = 'legacy')),
          (SELECT lease_token FROM taken2), 'the row stores that token');

SELECT * FROM finish();
ROLLBACK;
