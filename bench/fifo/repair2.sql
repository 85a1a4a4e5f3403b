SELECT public.st_repair();
