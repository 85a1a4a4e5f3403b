-- On an adopted table the pgdrain_* checks are NOT VALID: adoption reads no history, sent rows that
-- break them stay; new rows are refused. A check that a pending row breaks is left out with a
-- WARNING (a CHECK is tested on every UPDATE, so it would make that row's claim fail forever), and
-- added by a later create_queue once the row is delivered.
BEGIN;
SELECT plan(6);

CREATE TABLE public.reg_adopt_checks (id bigserial PRIMARY KEY, event_type text NOT NULL, payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), k text NOT NULL, sent_at timestamptz);
INSERT INTO public.reg_adopt_checks (event_type, payload, k, sent_at)
VALUES ('old', 'null', '', now()), ('pending', 'null', 'a', NULL), ('pending', '{}', 'b', NULL);

SELECT lives_ok($$SELECT outbox.create_queue('public.reg_adopt_checks', 'k')$$,
                'a table with rows that break the checks is adopted');
SELECT results_eq($$SELECT conname::text COLLATE "default", convalidated FROM pg_constraint
                    WHERE conrelid = 'public.reg_adopt_checks'::regclass AND conname LIKE 'pgdrain%' ORDER BY 1$$,
                  $$VALUES ('pgdrain_attempt_count_not_negative'::text, false), ('pgdrain_headers_string_object', false),
                           ('pgdrain_next_attempt_at_within_max_delay', false), ('pgdrain_partition_key_not_empty', false)$$,
                  'its checks are NOT VALID, and the one a pending row breaks is left out');
SELECT throws_ok($$INSERT INTO public.reg_adopt_checks (event_type, payload, k) VALUES ('e', '{}', '')$$, '23514', NULL,
                 'a new row with an empty key is refused');
SELECT results_eq($$SELECT id, partition_key FROM outbox.claim_batch('public.reg_adopt_checks', 10) ORDER BY id$$,
                  $$VALUES (2::bigint, 'a'::text), (3, 'b')$$,
                  'the pending rows, the JSON null one included, are claimed');
UPDATE public.reg_adopt_checks SET sent_at = now() WHERE id = 2;
SELECT lives_ok($$SELECT outbox.create_queue('public.reg_adopt_checks', 'k')$$, 'create_queue runs again');
SELECT is((SELECT convalidated FROM pg_constraint WHERE conrelid = 'public.reg_adopt_checks'::regclass
           AND conname = 'pgdrain_payload_not_json_null'), false,
          'and, the row being delivered, adds the left-out check, NOT VALID');

SELECT * FROM finish();
ROLLBACK;
