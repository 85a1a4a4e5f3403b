-- apply_results records a whole batch in one call: one (id, applied) row per input id in input
-- order; rows whose token matches get their outcome, the others are reported false and unchanged.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue(max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 4) AS r \gset
CREATE TEMP TABLE b ON COMMIT DROP AS SELECT row_number() OVER (ORDER BY id) AS n, * FROM outbox.claim_batch(:'q', 10);
SELECT test_helpers.row_json(:'q', (:'r'::bigint[])[3]) AS third_before \gset

-- Input order deliberately differs from id order; row 3 carries a wrong token.
SELECT (SELECT array_agg(id ORDER BY o) FROM b JOIN (VALUES (4, 1), (3, 2), (1, 3), (2, 4)) v(n, o) USING (n)) AS ids,
       (SELECT array_agg(CASE WHEN n = 3 THEN gen_random_uuid() ELSE lease_token END ORDER BY o)
          FROM b JOIN (VALUES (4, 1), (3, 2), (1, 3), (2, 4)) v(n, o) USING (n)) AS toks \gset

SELECT results_eq(
  format('SELECT id, applied FROM outbox.apply_results(%L, %L, %L, %L, %L)', :'q', :'ids', :'toks',
         '{sent,sent,transient,permanent}', '{NULL,NULL,"timeout","400"}'),
  format('VALUES (%s::bigint, true), (%s, false), (%s, true), (%s, true)',
         (:'ids'::bigint[])[1], (:'ids'::bigint[])[2], (:'ids'::bigint[])[3], (:'ids'::bigint[])[4]),
  'apply_results reports one row per id, in input order, applied only where the token matched');
SELECT results_eq(
  format('SELECT id, sent_at IS NOT NULL, attempt_count, last_error, lease_token IS NULL FROM %s ORDER BY id', :'q'),
  format($$VALUES (%s::bigint, false, 1, 'timeout'::text, true), (%s, false, 3, '400', true), (%s, false, 0, NULL, false), (%s, true, 0, NULL, true)$$,
         (:'r'::bigint[])[1], (:'r'::bigint[])[2], (:'r'::bigint[])[3], (:'r'::bigint[])[4]),
  'each matched row got its own outcome and error (transient, permanent, sent)');
SELECT is(test_helpers.row_json(:'q', (:'r'::bigint[])[3]), :'third_before'::jsonb,
          'the row with the wrong token is byte-for-byte unchanged');

SELECT is_empty(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', '{}', '{}', '{}'),
                'an empty batch returns no rows');
SELECT results_eq(
  format('SELECT id, applied FROM outbox.apply_results(%L, %L, %L, %L)', :'q',
         ARRAY[(:'r'::bigint[])[4], 999999999], ARRAY[gen_random_uuid(), gen_random_uuid()], '{sent,sent}'),
  format('VALUES (%s::bigint, false), (999999999, false)', (:'r'::bigint[])[4]),
  'an already sent row and an unknown id are both reported not applied');

-- A batch on a partitioned queue moves every partition's head.
SELECT test_helpers.new_queue('k') AS p \gset
SELECT count(test_helpers.add(:'p', 2, 'k' || i)) AS _ FROM generate_series(1, 3) i \gset
CREATE TEMP TABLE pb ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'p', 10);
SELECT results_eq(
  format('SELECT id, applied FROM outbox.apply_results(%L, %L, %L, %L)', :'p',
         (SELECT array_agg(id ORDER BY id) FROM pb), (SELECT array_agg(lease_token ORDER BY id) FROM pb), '{sent,sent,sent}'),
  'SELECT id, true FROM pb ORDER BY id',
  'a batch of three sent heads is applied');
SELECT set_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'p'),
              format('SELECT max(id) FROM %s GROUP BY k', :'p'),
              'after the batch every partition''s second row is its head');

SELECT * FROM finish();
ROLLBACK;
