-- Adopting a table adds event_id without rewriting it: rows written before have none, and the
-- claims hand out one derived from the queue and id, the same on every claim; new rows get their
-- own. An event_id column of another type is refused.
BEGIN;
SELECT plan(5);

CREATE TABLE public.reg_adopt_ids (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_type text NOT NULL,
  payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO public.reg_adopt_ids (event_type, payload) VALUES ('old', '{}');
SELECT outbox.create_queue('public.reg_adopt_ids');
INSERT INTO public.reg_adopt_ids (event_type, payload) VALUES ('new', '{}');
SELECT results_eq($$SELECT event_type, event_id IS NULL FROM public.reg_adopt_ids ORDER BY id$$,
  $$VALUES ('old'::text, true), ('new', false)$$, 'the old row has no event_id, a new one gets its own');
SELECT event_id AS first FROM outbox.claim_batch('public.reg_adopt_ids', 10) WHERE event_type = 'old' \gset
SELECT isnt(:'first'::uuid, NULL, 'the claim hands the old row an event_id all the same');
SELECT test_helpers.expire_leases('public.reg_adopt_ids') AS _ \gset
SELECT is((SELECT event_id FROM outbox.claim_batch('public.reg_adopt_ids', 10) WHERE event_type = 'old'), :'first'::uuid,
  'the same one on the next claim');

CREATE TABLE public.reg_adopt_bad_id (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_type text NOT NULL,
  payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), event_id text);
SELECT throws_ok($$SELECT outbox.create_queue('public.reg_adopt_bad_id')$$, '22023',
  'create_queue: queue table public.reg_adopt_bad_id has an event_id column of type text; pgdrain needs uuid (the event''s stable identity)',
  'an event_id of another type is refused');
SELECT is_empty($$SELECT 1 FROM outbox.queues WHERE queue = 'public.reg_adopt_bad_id'$$, 'and nothing is registered');

SELECT * FROM finish();
ROLLBACK;
