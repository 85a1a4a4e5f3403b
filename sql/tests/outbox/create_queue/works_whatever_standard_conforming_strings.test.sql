-- With standard_conforming_strings off (a legacy setting some databases or roles still carry),
-- pgdrain's functions read their literals as they do with it on: create_queue registers a new
-- queue and re-registers one (it failed: "invalid byte sequence for encoding UTF8: 0x00", then
-- "relation ... already exists"), check_indexes finds the required indexes (it named them missing),
-- and a queue name with a character other than the dot between schema and table is refused.
-- The first calls of the session run with the setting off, before any plan is cached.
BEGIN;
SELECT plan(5);
SET LOCAL standard_conforming_strings = off;
SET LOCAL escape_string_warning = off;

SELECT lives_ok($$SELECT outbox.create_queue('public.scs_q', 'k')$$, 'create_queue registers a new queue');
SELECT is_empty($$SELECT * FROM outbox.check_indexes('public.scs_q')$$, 'check_indexes finds the required indexes');
SELECT lives_ok($$SELECT outbox.create_queue('public.scs_q', 'k')$$, 'create_queue re-registers it');
SELECT is((SELECT count(*)::int FROM pg_catalog.pg_index WHERE indrelid = 'public.scs_q'::regclass), 3,
          'no index was made twice');
SELECT throws_ok($$SELECT outbox.create_queue('public,scs_q', 'k')$$, '22023', NULL,
                 'a comma is not the dot between schema and table');

SELECT * FROM finish();
ROLLBACK;
