-- An interval whose months, days and time have opposite signs compares as one span and adds to the
-- clock as another: '-12000 mons 360001 days' is "greater than 0 and at most 1 day" to PostgreSQL's
-- comparison, and a lease of it ended 14 years ago (the row could be claimed again at once: two
-- workers). Every interval argument with a bound refuses such a value with 22023 naming itself,
-- and the call changes nothing; intervals of one sign (a month for a retention window) still pass.
BEGIN;
SELECT plan(12);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS _ \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok(format($$SELECT * FROM outbox.claim_batch(%L, 1, '-12000 mons 360001 days')$$, :'q'), '22023',
  'claim_batch: lease must not mix signs across its months, days and time (a month or a day has no fixed length), got -1000 years +360001 days',
  'claim_batch refuses a lease that compares as a day and ends in the past');
SELECT throws_ok(format($$SELECT * FROM outbox.claim_runs(%L, 1, '1 day -86399 seconds', 2)$$, :'q'), '22023', NULL,
  'claim_runs refuses a lease of a day minus almost a day');
SELECT is(test_helpers.state(:'q'), :'before', '... and nothing was claimed');

CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 1, '30 seconds');
SELECT id AS cid, lease_token AS ctok FROM c \gset
SELECT test_helpers.row_json(:'q', :cid) AS claimed \gset
SELECT throws_ok(format($$SELECT outbox.extend_lease(%L, %s, %L, '12000 mons -359999 days')$$, :'q', :cid, :'ctok'),
  '22023', NULL, 'extend_lease refuses a lease that compares as a day and ends 14 years ahead');
SELECT is(test_helpers.row_json(:'q', :cid), :'claimed'::jsonb, '... and the row is unchanged');

SELECT throws_ok(format($$SELECT outbox.drainer_waits(%L, '12000 mons -359999 days')$$, :'q'), '22023', NULL,
  'drainer_waits refuses a wait that compares as a day');
SELECT throws_ok(format($$SELECT outbox.claim_turn(%L, '12000 mons -360000 days 5 seconds')$$, :'q'), '22023', NULL,
  'claim_turn refuses a pause that compares as 5 seconds');
SELECT throws_ok($$SELECT outbox.create_queue('public.never_made', backoff_max => '1200 mons -35999 days')$$, '22023', NULL,
  'create_queue refuses a backoff_max that compares as a day');
SELECT throws_ok($$SELECT outbox.create_queue('public.never_made', max_delay => '120000 mons -3599999 days')$$, '22023', NULL,
  'create_queue refuses a max_delay of mixed signs');
SELECT throws_ok(format($$SELECT outbox.purge_sent(%L, '-12000 mons 360001 days', 100)$$, :'q'), '22023', NULL,
  'purge_sent refuses an older_than that compares as a day and reaches into the future');
SELECT throws_ok(format($$SELECT * FROM outbox.wedged_partitions(%L, '-12000 mons 360001 days')$$, :'q'), '22023', NULL,
  'wedged_partitions refuses it too');
SELECT is(outbox.purge_sent(:'q', '1 mon', 100), 0::bigint, 'an older_than of a month (one sign) still passes');

SELECT * FROM finish();
ROLLBACK;
