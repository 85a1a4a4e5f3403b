\set k random(1, :nkeys)
\set n random(1, 4)
BEGIN;
INSERT INTO public.st (event_type, payload, k)
  SELECT 'multi', '{}', 'k' || (1 + (:k + g) % :nkeys) FROM generate_series(1, :n) g;
INSERT INTO public.st (event_type, payload, k) VALUES ('multi2', '{}', 'k' || :k);
INSERT INTO public.slow_commit VALUES (1);
COMMIT;
