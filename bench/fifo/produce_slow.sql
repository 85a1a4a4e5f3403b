\set k random(1, :nkeys)
BEGIN;
INSERT INTO public.st (event_type, payload, k) VALUES ('slow', '{}', 'k' || :k);
INSERT INTO public.slow_commit VALUES (1);
COMMIT;
