\set k random(1, :nkeys)
INSERT INTO public.st (event_type, payload, k) VALUES ('fast', '{}', 'k' || :k);
