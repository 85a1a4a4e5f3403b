-- outbox.version names the schema's release and the number of its last migration, in one row;
-- every role that may use the schema can read it.
BEGIN;
SELECT plan(7);

SELECT results_eq($$SELECT * FROM outbox.version()$$,
  $$VALUES ('0.1.0'::text, 56)$$,
  'outbox.version returns the release and the last migration (00037)');
SELECT is((outbox.version()).migration, 56, 'the migration number reads as a field of the call');
SELECT is((SELECT count(*)::int FROM outbox.version()), 1, 'outbox.version returns exactly one row');

SELECT ok(has_function_privilege(r, 'outbox.version()', 'EXECUTE'),
          format('%s may call outbox.version', r))
FROM unnest(ARRAY['pgdrain_worker', 'pgdrain_producer', 'pgdrain_operator', 'pgdrain_reader']) r
ORDER BY r;

SELECT * FROM finish();
ROLLBACK;
