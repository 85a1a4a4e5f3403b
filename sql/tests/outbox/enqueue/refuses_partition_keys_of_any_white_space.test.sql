-- enqueue and enqueue_event refuse a partition key that shows nothing, as they refuse such an
-- event_type: tabs and line breaks, no-break, ideographic and other Unicode spaces, zero-width
-- characters and the byte order mark (producers that lost their key would share one partition
-- under a key nobody can see), with 22023 naming the argument, and insert nothing. A key with such
-- characters around visible ones is accepted as it is.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS p \gset
SELECT test_helpers.state(:'p') AS pb \gset

SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', 'e', '{}', E'\t\n'), '22023',
  'enqueue: partition_key must be a non-empty string, got only white space and invisible characters (U+0009 U+000A)',
  'tabs and line breaks are blank, named by code point');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', 'e', '{}', E'\u00a0\u3000\u2003'), '22023',
  'enqueue: partition_key must be a non-empty string, got only white space and invisible characters (U+00A0 U+3000 U+2003)',
  'no-break, ideographic and em spaces are blank');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', 'e', '{}', E'\u200b\ufeff'), '22023', NULL,
  'zero-width characters and the byte order mark are blank');
SELECT throws_ok(format('SELECT * FROM outbox.enqueue_event(%L, %L, %L, %L)', :'p', 'e', '{}', E'\u3000'), '22023', NULL,
  'enqueue_event refuses them too');
SELECT is(test_helpers.state(:'p'), :'pb'::jsonb, 'the refused calls inserted nothing and used no id');
SELECT ok(outbox.enqueue(:'p', 'e', '{}', E'\u3000a\t') IS NOT NULL, 'a key with blanks around a visible character is accepted');

SELECT * FROM finish();
ROLLBACK;
