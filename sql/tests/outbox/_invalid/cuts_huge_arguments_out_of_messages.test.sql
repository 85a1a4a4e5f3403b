-- An argument error that quotes a huge argument (a 1 MB queue name, outcome or event type) keeps
-- its rule and the argument's first characters, then says how long the message was: 1,000
-- characters, not megabytes, go to the client and the server log. Short messages are whole.
BEGIN;
SELECT plan(4);

CREATE FUNCTION pg_temp.message_of(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE p_sql;
  RETURN NULL;
EXCEPTION WHEN invalid_parameter_value THEN
  RETURN SQLERRM;
END;
$$;
SELECT pg_temp.message_of($$SELECT outbox.stats(repeat('x', 1048576))$$) AS m \gset
SELECT ok(length(:'m') < 1100, 'a 1 MB queue name gives a message of at most 1,100 characters');
SELECT ok(:'m' LIKE 'stats: queue must be a plain name "schema.table" (letters, digits, _), got ''xxx%',
  'which keeps the rule and the argument''s first characters');
SELECT ok(:'m' LIKE '%... (1048646 characters in all)', 'and says how long it was');
SELECT is(pg_temp.message_of($$SELECT outbox.stats('no such name!')$$),
  'stats: queue must be a plain name "schema.table" (letters, digits, _), got ''no such name!''',
  'a short message is whole');

SELECT * FROM finish();
ROLLBACK;
