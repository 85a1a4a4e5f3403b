-- settle_locked records the outcomes of rows this transaction claimed with claim_locked, with
-- the same rules as apply_result, and writes each row exactly once (claim + settle = one version).
BEGIN;
SELECT plan(8);

SELECT test_helpers.new_queue(max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 3) AS r \gset
SELECT test_helpers.updates_in_tx(:'q') AS upd_before \gset
CREATE TEMP TABLE l ON COMMIT DROP AS SELECT * FROM outbox.claim_locked(:'q', 10);

SELECT is(outbox.settle_locked(:'q', :'r'::bigint[], '{sent,transient,permanent}', '{NULL,"timeout","400"}'), 3::bigint,
          'settle_locked records three outcomes and says so');
SELECT results_eq(
  format('SELECT id, sent_at IS NOT NULL, attempt_count, next_attempt_at > now(), last_error, lease_token, leased_until FROM %s ORDER BY id', :'q'),
  format($$VALUES (%s::bigint, true, 0, NULL::boolean, NULL::text, NULL::uuid, NULL::timestamptz),
                  (%s, false, 1, true, 'timeout', NULL, NULL),
                  (%s, false, 3, NULL, '400', NULL, NULL)$$,
         (:'r'::bigint[])[1], (:'r'::bigint[])[2], (:'r'::bigint[])[3]),
  'sent, transient (attempt + backoff) and permanent (poisoned) are recorded like apply_result records them');
SELECT is(test_helpers.updates_in_tx(:'q') - :upd_before::bigint, 3::bigint,
          'claim_locked + settle_locked wrote each of the three rows exactly once');

SELECT throws_ok(format('SELECT outbox.settle_locked(%L, %L, %L)', :'q', ARRAY[(:'r'::bigint[])[2]], '{transient}'), '55000',
  format('settle_locked: row %s of %s is not held by this transaction (claim it with claim_locked in the same transaction)',
         (:'r'::bigint[])[2], :'q'),
  'a row already settled can not be settled again (no second attempt counted)');
SELECT is(test_helpers.row_json(:'q', (:'r'::bigint[])[2]) -> 'attempt_count', '1'::jsonb, 'its attempt_count is still 1');

-- Partitioned: settling the head moves the partition on, within the same transaction.
SELECT test_helpers.new_queue('k') AS p \gset
SELECT test_helpers.add(:'p', 2, 'a') AS pa \gset
SELECT id AS head FROM outbox.claim_locked(:'p') \gset
SELECT is(outbox.settle_locked(:'p', ARRAY[:head::bigint], '{sent}'), 1::bigint, 'the head of partition a is settled as sent');
SELECT results_eq(format('SELECT id FROM outbox.claim_locked(%L)', :'p'), format('VALUES (%s::bigint)', (:'pa'::bigint[])[2]),
                  'the next row of the partition becomes claimable');
SELECT is(outbox.settle_locked(:'p', '{}', '{}'), 0::bigint, 'an empty settle records nothing');

SELECT * FROM finish();
ROLLBACK;
