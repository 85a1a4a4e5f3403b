-- The partition key of an unsent event is fixed (pgdrain_key_fixed): an UPDATE that moves it to
-- another key, in the inserting transaction or later, also through INSERT ... ON CONFLICT DO UPDATE,
-- fails with 23514 naming the column, the event and the table, and changes nothing (moved, the row
-- had no head until the repair pass, and rows of the new key written after it could pass it). An
-- UPDATE that keeps the key, of another column, or of a sent row's key goes through.
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT (test_helpers.add(:'q', 1, 'a'))[1] AS a1 \gset

SELECT throws_ok(format('UPDATE %s SET k = ''b'' WHERE id = %s', :'q', :a1), '23514',
                 format('pgdrain: the partition key (column k) of event %s of public.%s can not change while it is not sent',
                        :a1, split_part(:'q', '.', 2)),
                 'a key change of an event in the inserting transaction is refused, naming column, event and table');
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT throws_ok(format('UPDATE %s SET k = ''b'' WHERE id = %s', :'q', :a1), '23514', NULL,
                 'a key change of a committed pending event is refused');
SELECT throws_ok(format('INSERT INTO %s (id, event_type, payload, k) VALUES (%s, ''e'', ''{}'', ''a'')
                         ON CONFLICT (id) DO UPDATE SET k = ''c''', :'q', :a1), '23514', NULL,
                 'and through INSERT ... ON CONFLICT DO UPDATE');
SELECT results_eq(format('SELECT k FROM %s WHERE id = %s', :'q', :a1), $$VALUES ('a'::text)$$,
                  'a refused change leaves the row as it was');
SELECT lives_ok(format('UPDATE %s SET k = k, payload = ''{"x": 1}'' WHERE id = %s', :'q', :a1),
                'an UPDATE that names the column but keeps the key goes through');
SELECT lives_ok(format('UPDATE %s SET payload = ''{"x": 2}'' WHERE id = %s', :'q', :a1),
                'an UPDATE of another column goes through');

SELECT id AS claimed, lease_token AS token FROM outbox.claim_batch(:'q', 1) \gset
SELECT is(:claimed, :a1, 'the event is claimed from its key');
SELECT outbox.apply_result(:'q', :a1, :'token', 'sent') IS NULL AS _ \gset
SELECT lives_ok(format('UPDATE %s SET k = ''b'' WHERE id = %s', :'q', :a1),
                'a sent event''s key may change');
SELECT is_empty(format('SELECT * FROM outbox.repair(%L, true)', :'q'), 'nothing for the repair pass to find');

SELECT * FROM finish();
ROLLBACK;
