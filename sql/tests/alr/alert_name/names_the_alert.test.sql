-- alert_name returns an alert's name (the engine's message text), NULL for an unknown id; a NULL id
-- is refused (22023).
BEGIN;
SELECT plan(3);
\ir ../_fixtures.sql
SELECT alr.add_alert('api 5xx above 2%') AS a \gset
SELECT is(alr.alert_name(:'a'), 'api 5xx above 2%', 'alert_name names the alert');
SELECT is(alr.alert_name(gen_random_uuid()), NULL, 'alert_name is NULL for an unknown alert');
SELECT throws_ok($$SELECT alr.alert_name(NULL)$$, '22023',
  'alert_name: alert_id must not be NULL, got NULL', 'a NULL alert_id is refused');
SELECT * FROM finish();
ROLLBACK;
