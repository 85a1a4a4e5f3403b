-- alr._is_blank is true for a text made only of white space, by an explicit class that does not
-- follow the database's ctype ([[:space:]] is ASCII only under C, the clusters' --no-locale): every
-- character of Unicode's White_Space property and the zero-width U+180E, U+200B..U+200D, U+2060,
-- U+FEFF. Any other character makes the text not blank; '' is blank, NULL gives NULL.
BEGIN;
SELECT plan(7);

CREATE TEMP TABLE blanks AS SELECT cp FROM unnest(ARRAY[9, 10, 11, 12, 13, 32, 133, 160, 5760, 6158,
  8192, 8193, 8194, 8195, 8196, 8197, 8198, 8199, 8200, 8201, 8202, 8203, 8204, 8205,
  8232, 8233, 8239, 8287, 8288, 12288, 65279]) cp;

SELECT is_empty('SELECT to_hex(cp) FROM blanks WHERE alr._is_blank(chr(cp)) IS NOT TRUE',
                'each white space or zero-width character alone is blank');
SELECT ok(alr._is_blank((SELECT string_agg(chr(cp), '' ORDER BY cp DESC) FROM blanks)), 'all of them together are blank');
SELECT is_empty($$SELECT to_hex(cp) FROM generate_series(1, 12500) cp
                  WHERE cp NOT IN (SELECT cp FROM blanks) AND alr._is_blank(chr(cp))$$,
                'no other character from U+0001 to U+30D4 is blank (U+200E, U+00AD, U+2800 included)');
SELECT ok(NOT alr._is_blank(E'\u2003x\u200d'), 'a text with a visible character is not blank');
SELECT ok(alr._is_blank(''), 'the empty text is blank');
SELECT is(alr._is_blank(NULL), NULL, 'NULL gives NULL');
SELECT is((SELECT proconfig FROM pg_proc WHERE oid = 'alr._is_blank(text)'::regprocedure),
          ARRAY['search_path=pg_catalog, pg_temp'], 'it pins search_path like every alr function');

SELECT * FROM finish();
ROLLBACK;
