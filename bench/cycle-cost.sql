-- Procedures of bench/cycle-cost.sh: claim 32 rows and record them sent, n times, each step its
-- own transaction (lease) or claim and settle in one (lock), the way a drainer does, without the
-- drainer: what the server spends per event, with nothing else around it.
CREATE OR REPLACE PROCEDURE public.cycle_lease(q text, n integer, run_length integer DEFAULT 1)
LANGUAGE plpgsql AS $$
DECLARE ids bigint[]; toks uuid[]; got integer := 0;
BEGIN
  FOR i IN 1..n LOOP
    SELECT array_agg(c.id), array_agg(c.lease_token) INTO ids, toks
    FROM outbox.claim_runs(q, 32, '30 seconds', run_length) c;
    COMMIT;
    EXIT WHEN ids IS NULL;
    PERFORM outbox.apply_results(q, ids, toks, array_fill('sent'::text, ARRAY[cardinality(ids)]));
    got := got + cardinality(ids);
    COMMIT;
  END LOOP;
  RAISE NOTICE 'events %', got;
END $$;
CREATE OR REPLACE PROCEDURE public.cycle_lock(q text, n integer, run_length integer DEFAULT 1)
LANGUAGE plpgsql AS $$
DECLARE ids bigint[]; got integer := 0;
BEGIN
  FOR i IN 1..n LOOP
    SELECT array_agg(c.id) INTO ids FROM outbox.claim_locked_runs(q, 32, run_length) c;
    IF ids IS NULL THEN COMMIT; EXIT; END IF;
    PERFORM outbox.settle_locked(q, ids, array_fill('sent'::text, ARRAY[cardinality(ids)]));
    got := got + cardinality(ids);
    COMMIT;
  END LOOP;
  RAISE NOTICE 'events %', got;
END $$;
