-- alr.version names the ladder schema's release and the number of its last migration; every role
-- that may use the schema can read it.
BEGIN;
SELECT plan(6);

SELECT results_eq($$SELECT * FROM alr.version()$$,
  $$VALUES ('0.1.0'::text, 15)$$,
  'alr.version returns the release and the last migration');
SELECT is((SELECT count(*)::int FROM alr.version()), 1, 'alr.version returns exactly one row');

SELECT ok(has_function_privilege(r, 'alr.version()', 'EXECUTE'),
          format('%s may call alr.version', r))
FROM unnest(ARRAY['pgdrain_worker', 'pgdrain_producer', 'pgdrain_operator', 'pgdrain_reader']) r
ORDER BY r;

SELECT * FROM finish();
ROLLBACK;
