SELECT public.st_drain_lock(8, 0, 0);
