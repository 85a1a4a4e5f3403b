CALL public.st_drain_lease(8, 0.03, 0.004, 0.002);
