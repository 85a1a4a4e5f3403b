-- alert_name returns an alert's name (the engine's message text), NULL for an unknown id.
BEGIN;
SELECT plan(2);
\ir ../_fixtures.sql
SELECT alr.add_alert('api 5xx above 2%') AS a \gset
SELECT is(alr.alert_name(:'a'), 'api 5xx above 2%', 'alert_name names the alert');
SELECT is(alr.alert_name(gen_random_uuid()), NULL, 'alert_name is NULL for an unknown alert');
SELECT * FROM finish();
ROLLBACK;
