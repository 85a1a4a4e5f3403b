-- create_policy refuses a name, channel or target made only of Unicode white space or zero-width
-- characters, whatever the database's ctype (alr 00010: U+2003 and others got through under C), and
-- caps them (alr 00010): name and channel at most 200 characters (a channel is a metric label),
-- target at most 1000, counted in characters. 22023 naming the argument; nothing written.
BEGIN;
SELECT plan(14);
\ir ../_fixtures.sql

CREATE FUNCTION pg_temp.sqlstate_of(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE p_sql;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END $$;
CREATE TEMP TABLE blanks AS SELECT chr(cp) AS b FROM unnest(ARRAY[9, 10, 11, 12, 13, 32, 133, 160, 5760, 6158,
  8192, 8193, 8194, 8195, 8196, 8197, 8198, 8199, 8200, 8201, 8202, 8203, 8204, 8205,
  8232, 8233, 8239, 8287, 8288, 12288, 65279]) cp;
INSERT INTO state_before SELECT pg_temp.alr_state();

SELECT is_empty($$SELECT to_hex(ascii(b)) FROM blanks WHERE pg_temp.sqlstate_of(format(
                  'SELECT alr.create_policy(%L, ''[{"delay":"0s","channel":"c","target":"t"}]'')', b || b)) <> '22023'$$,
                'no name made of white space or zero-width characters is accepted');
SELECT is_empty($$SELECT to_hex(ascii(b)) FROM blanks WHERE pg_temp.sqlstate_of(format(
                  'SELECT alr.create_policy(''p'', %L)', jsonb_build_array(jsonb_build_object('delay', '0s', 'channel', b, 'target', 't')))) <> '22023'$$,
                'no such channel is accepted');
SELECT is_empty($$SELECT to_hex(ascii(b)) FROM blanks WHERE pg_temp.sqlstate_of(format(
                  'SELECT alr.create_policy(''p'', %L)', jsonb_build_array(jsonb_build_object('delay', '0s', 'channel', 'c', 'target', b)))) <> '22023'$$,
                'no such target is accepted');
SELECT throws_ok($$SELECT alr.create_policy(E'\u2003', '[{"delay":"0s","channel":"c","target":"t"}]')$$, '22023',
                 E'create_policy: name must be a non-empty text, got \'\u2003\'', 'an em space name is named in the error');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay":"0s","channel":"\u3000","target":"t"}]')$$, '22023',
                 E'create_policy: steps[0].channel must be a non-empty string, got "\u3000"', 'an ideographic space channel too');
SELECT throws_ok(format('SELECT alr.create_policy(%L, ''[{"delay":"0s","channel":"c","target":"t"}]'')', repeat('n', 100000)), '22023',
                 'create_policy: name must be at most 200 characters, got 100000 characters', 'a name over 200 characters is refused');
SELECT throws_ok(format('SELECT alr.create_policy(''p'', %L)', jsonb_build_array(
                   jsonb_build_object('delay', '0s', 'channel', 'c', 'target', 't'),
                   jsonb_build_object('delay', '0s', 'channel', repeat('c', 1000000), 'target', 't'))), '22023',
                 'create_policy: steps[1].channel must be at most 200 characters, got 1000000 characters',
                 'a channel over 200 characters is refused, naming its step');
SELECT throws_ok(format('SELECT alr.create_policy(''p'', %L)', jsonb_build_array(
                   jsonb_build_object('delay', '0s', 'channel', 'c', 'target', repeat('t', 1001)))), '22023',
                 'create_policy: steps[0].target must be at most 1000 characters, got 1001 characters',
                 'a target over 1000 characters is refused');
SELECT throws_ok(format('SELECT alr.create_policy(%L, ''[{"delay":"0s","channel":"c","target":"t"}]'')', repeat(E'\u3000', 300)), '22023',
                 'create_policy: name must be at most 200 characters, got 300 characters',
                 'a blank name over the cap gets the length error, not the whole name echoed');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'no refused policy left a trace');

SELECT lives_ok(format('SELECT alr.create_policy(%L, %L)', repeat('é', 200), jsonb_build_array(
                  jsonb_build_object('delay', '0s', 'channel', repeat('é', 200), 'target', repeat('é', 1000)))),
                'a name and a channel of 200 characters and a target of 1000 are accepted (characters, not bytes)');
SELECT lives_ok($$SELECT alr.create_policy(E'on\u2003call', '[{"delay":"0s","channel":"c\u200dx","target":"\u00a0t"}]')$$,
                'white space beside visible characters is kept');
SELECT is((SELECT count(*)::int FROM alr.escalation_policies WHERE name = repeat('é', 200)), 1, 'the long one was written');
SELECT is((SELECT target FROM alr.escalation_steps WHERE channel = E'c\u200dx'), E'\u00a0t', 'as given');

SELECT * FROM finish();
ROLLBACK;
