-- short leases that sometimes run out before the result (re-claims, refused results)
CALL public.st_drain_lease(8, 0.03, 0.004, 0.06, '50 milliseconds');
