-- purge_sent and wedged_partitions refuse an older_than the clock can not subtract (further back
-- than 1,000 years: PostgreSQL's own 22008 "timestamp out of range" before), naming the argument;
-- nothing changes.
BEGIN;
SELECT plan(5);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS ids \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok(format('SELECT outbox.purge_sent(%L, %L)', :'q', '178000000 years'), '22023',
  'purge_sent: older_than must be at most 1000 years, got 178000000 years', 'purge_sent refuses an older_than past the clock''s range');
SELECT throws_ok(format('SELECT outbox.purge_sent(%L, %L)', :'q', '-1 second'), '22023',
  'purge_sent: older_than must be 0 or more, got -00:00:01', 'and a negative one');
SELECT lives_ok(format('SELECT outbox.purge_sent(%L, %L)', :'q', '1000 years'), 'a thousand years is a time');
SELECT throws_ok(format('SELECT * FROM outbox.wedged_partitions(%L, %L)', :'q', '178000000 years'), '22023',
  'wedged_partitions: older_than must be at most 1000 years, got 178000000 years', 'so does wedged_partitions');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'nothing changed');

SELECT * FROM finish();
ROLLBACK;
