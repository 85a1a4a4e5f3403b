INSERT INTO public.replog SELECT clock_timestamp(), r.* FROM outbox.repair('public.st', true) r;
