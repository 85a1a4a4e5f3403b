-- apply_results validates the whole batch before recording anything: arrays of different
-- lengths, NULL or duplicate ids, NULL tokens and unknown outcomes raise 22023 naming the
-- argument, and nothing in the batch is recorded.
BEGIN;
SELECT plan(12);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 2) AS r \gset
CREATE TEMP TABLE b ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT array_agg(id ORDER BY id) AS ids, array_agg(lease_token ORDER BY id) AS toks FROM b \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', 'public.no_such_queue_t6', :'ids', :'toks', '{sent,sent}'),
  '42P01', 'apply_results: queue public.no_such_queue_t6 is not registered (call outbox.create_queue first)',
  'apply_results names an unknown queue with 42P01');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', :'ids', :'toks', '{sent}'), '22023',
  'apply_results: outcomes must have as many elements as ids (2), got 1', 'apply_results rejects fewer outcomes than ids');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', :'ids', ARRAY[(:'toks'::uuid[])[1]], '{sent,sent}'), '22023',
  'apply_results: lease_tokens must have as many elements as ids (2), got 1', 'apply_results rejects fewer tokens than ids');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L, %L)', :'q', :'ids', :'toks', '{sent,sent}', '{a,b,c}'), '22023',
  'apply_results: errors must be NULL or have as many elements as ids (2), got 3', 'apply_results rejects more errors than ids');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, NULL, %L)', :'q', :'ids', '{sent,sent}'), '22023',
  'apply_results: lease_tokens must have as many elements as ids (2), got NULL', 'apply_results rejects NULL lease_tokens');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, NULL, %L, %L)', :'q', :'toks', '{sent,sent}'), '22023',
  'apply_results: ids must not be NULL', 'apply_results rejects NULL ids');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', ARRAY[(:'ids'::bigint[])[1], (:'ids'::bigint[])[1]], :'toks', '{sent,sent}'), '22023',
  'apply_results: ids must be distinct', 'apply_results rejects duplicate ids');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', ARRAY[(:'ids'::bigint[])[1], NULL], :'toks', '{sent,sent}'), '22023',
  'apply_results: ids must not contain NULL', 'apply_results rejects a NULL id');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', :'ids', ARRAY[(:'toks'::uuid[])[1], NULL], '{sent,sent}'), '22023',
  'apply_results: lease_tokens must not contain NULL', 'apply_results rejects a NULL token');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q', :'ids', :'toks', '{sent,ok}'), '22023',
  'apply_results: outcomes must hold only ''sent'', ''transient'' or ''permanent'', got ''ok'' (element 2)',
  'apply_results rejects an unknown outcome even after a valid one');
SELECT throws_ok(format('SELECT * FROM outbox.apply_results(%L, %L, %L, %L)', :'q',
                        (SELECT array_agg(i) FROM generate_series(1, 10001) i)::text,
                        (SELECT array_agg(gen_random_uuid()) FROM generate_series(1, 10001) i)::text,
                        array_fill('sent'::text, ARRAY[10001])::text), '22023',
  'apply_results: ids must have at most 10000 elements, got 10001', 'apply_results rejects a batch over 10000');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'no rejected batch recorded anything (not even its valid rows)');

SELECT * FROM finish();
ROLLBACK;
