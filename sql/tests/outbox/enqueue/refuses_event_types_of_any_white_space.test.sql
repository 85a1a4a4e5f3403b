-- Blank is white space of any script, whatever the database's LC_CTYPE (under C, [[:space:]] is
-- ASCII only): enqueue refuses an event_type, and an operator action a reason, made only of
-- ideographic, em, hair or no-break spaces, line and paragraph separators, zero-width characters
-- or a byte order mark; a text with one visible character among them passes.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k') AS p \gset
SELECT test_helpers.state(:'p') AS before \gset
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', E'\u3000', '{}', 'x'), '22023',
  'enqueue: event_type must be a non-empty string', 'an ideographic space is blank');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', E'\u2003\u200a\u202f\u205f', '{}', 'x'), '22023',
  'enqueue: event_type must be a non-empty string', 'em, hair, narrow and mathematical spaces are blank');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', E'\u2028\u2029\u0085\u1680', '{}', 'x'), '22023',
  'enqueue: event_type must be a non-empty string', 'line and paragraph separators, NEL and the ogham space are blank');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', E'\u200c\u200d\u2060\u180e\ufeff', '{}', 'x'), '22023',
  'enqueue: event_type must be a non-empty string', 'zero-width characters and the byte order mark are blank');
SELECT is(test_helpers.state(:'p'), :'before', 'nothing was inserted');
SELECT cmp_ok(outbox.enqueue(:'p', E'\u3000a\u3000', '{}', 'x'), '>', 0::bigint, 'one visible character is enough');

SELECT outbox.enqueue(:'p', 'e', '{}', 'y') AS row \gset
SELECT throws_like(format('SELECT outbox.poison_row(%L, %s, 0, %L)', :'p', :row, E'\u3000\u2003'),
  '%reason must be a non-blank text%', 'an operator''s reason of ideographic and em spaces is blank');

SELECT * FROM finish();
ROLLBACK;
