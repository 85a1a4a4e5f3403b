-- created_at is the producer's to write (it may be given), and 'infinity' and '-infinity' are
-- timestamps: stats() computed now() - min(created_at) and failed with 22008 for every caller (the
-- drainer's gauges, the console) while such a row was pending. The oldest pending row is now the
-- oldest with a finite creation time; the counts include every row.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT format('INSERT INTO %s (event_type, payload, k, created_at) VALUES (%L, %L, %L, %L), (%L, %L, %L, %L), (%L, %L, %L, %L)',
              :'q', 'e', '{}', 'a', '-infinity', 'e', '{}', 'b', 'infinity', 'e', '{}', 'c', '2026-01-01 00:00:00+00') \gexec
SELECT lives_ok(format('SELECT * FROM outbox.stats(%L)', :'q'), 'stats answers with infinite creation times pending');
SELECT is((SELECT pending FROM outbox.stats(:'q')), 3::bigint, 'every pending row is counted');
SELECT is((SELECT oldest_pending_at FROM outbox.stats(:'q')), '2026-01-01 00:00:00+00'::timestamptz,
          'the oldest pending row is the oldest finite one');

SELECT * FROM finish();
ROLLBACK;
