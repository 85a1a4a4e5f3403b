-- claim_runs takes, with each partition's head, the rows that follow it, up to run_length per
-- partition, each with its own token, in id order; recording a run in one apply_results moves its
-- head once, past the whole run.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k') AS q \gset
-- a1 b1 a2 c1 a3 b2 a4 a5
SELECT ARRAY[test_helpers.add(:'q', 1, 'a'), test_helpers.add(:'q', 1, 'b'), test_helpers.add(:'q', 1, 'a'),
             test_helpers.add(:'q', 1, 'c'), test_helpers.add(:'q', 1, 'a'), test_helpers.add(:'q', 1, 'b'),
             test_helpers.add(:'q', 1, 'a'), test_helpers.add(:'q', 1, 'a')] AS r \gset
SELECT (:'r'::bigint[][])[1][1] AS a1, (:'r'::bigint[][])[2][1] AS b1, (:'r'::bigint[][])[3][1] AS a2,
       (:'r'::bigint[][])[4][1] AS c1, (:'r'::bigint[][])[5][1] AS a3, (:'r'::bigint[][])[6][1] AS b2,
       (:'r'::bigint[][])[7][1] AS a4, (:'r'::bigint[][])[8][1] AS a5 \gset

CREATE TEMP TABLE claimed ON COMMIT DROP AS
SELECT row_number() OVER () AS n, * FROM outbox.claim_runs(:'q', 100, '30 seconds', 3);
SELECT results_eq('SELECT id FROM claimed ORDER BY n',
  format('VALUES (%s::bigint), (%s), (%s), (%s), (%s), (%s)', :a1, :b1, :a2, :c1, :a3, :b2),
  'each partition''s head and the rows after it, at most 3 per partition, come in id order');
SELECT is((SELECT count(DISTINCT lease_token) FROM claimed), 6::bigint, 'every row has its own lease token');
SELECT is(test_helpers.ids_where(:'q', 'lease_token IS NULL'), ARRAY[:a4, :a5]::bigint[],
          'rows past a run''s length are not leased');
SELECT is_empty(format('SELECT * FROM outbox.claim_runs(%L, 100)', :'q'),
                'a partition whose run is in flight is not claimed again (its head is leased)');

SELECT is((SELECT count(*) FROM outbox.apply_results(:'q',
             (SELECT array_agg(id ORDER BY n) FROM claimed WHERE partition_key = 'a'),
             (SELECT array_agg(lease_token ORDER BY n) FROM claimed WHERE partition_key = 'a'),
             ARRAY['sent', 'sent', 'sent']) WHERE applied), 3::bigint,
          'a run is recorded in one call');
SELECT is((SELECT head_id FROM outbox.partition_heads h JOIN outbox.queues q USING (queue_id)
           WHERE q.queue = :'q' AND h.partition_key = 'a'), :a4::bigint,
          'the head moves past the whole run to the next row');
SELECT results_eq(format('SELECT id FROM outbox.claim_runs(%L, 100, %L, 3)', :'q', '30 seconds'),
  format('VALUES (%s::bigint), (%s)', :a4, :a5), 'the next claim takes the rest of the partition');

SELECT * FROM finish();
ROLLBACK;
