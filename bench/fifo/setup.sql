-- FIFO stress: a partitioned queue with hot keys, a delivery log written in the drain
-- transactions, and a log of dry-run repair findings. No manual write to pgdrain's state.
\set ON_ERROR_STOP on
DROP TABLE IF EXISTS public.dlog, public.replog, public.slow_commit, public.hsample, public.repdump, public.claimcheck CASCADE;
DROP FUNCTION IF EXISTS public.slow_commit_tg() CASCADE;
DO $$ BEGIN
  IF EXISTS (SELECT 1 FROM outbox.queues WHERE queue = 'public.st') THEN
    PERFORM outbox.drop_queue('public.st', true);
  END IF;
END $$;
DROP TABLE IF EXISTS public.st CASCADE;
CREATE TABLE public.st (
  id bigserial PRIMARY KEY,
  event_type text NOT NULL,
  payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  attempt_count int NOT NULL DEFAULT 0,
  next_attempt_at timestamptz,
  sent_at timestamptz,
  leased_until timestamptz,
  lease_token uuid,
  last_error text,
  k text NOT NULL);
SELECT outbox.create_queue('public.st', 'k', 5, '20 milliseconds', '300 milliseconds');

-- Every settled row, in the transaction that settled it (seq: order of settlement; a later
-- drain of the same key can only claim after this transaction committed, so seq follows
-- delivery order when FIFO holds).
CREATE TABLE public.dlog (seq bigserial PRIMARY KEY, id bigint NOT NULL, k text NOT NULL,
  outcome text NOT NULL, mode text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(),
  xid xid8 DEFAULT pg_current_xact_id());
CREATE INDEX ON public.dlog (k, id);
CREATE TABLE public.replog (at timestamptz, partition_key text, cause text, head_id bigint, detail text);

-- A slow commit: a deferred constraint trigger queued after pgdrain_commit's sleeps a few ms
-- while the commit step's locks are held.
CREATE UNLOGGED TABLE public.slow_commit (x int);
CREATE FUNCTION public.slow_commit_tg() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.001 + random() * coalesce(nullif(current_setting('st.slow', true), '')::float8, 0.004)); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON public.slow_commit DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION public.slow_commit_tg();

-- Lock mode: claim_locked + settle_locked in one transaction (optionally runs).
CREATE OR REPLACE FUNCTION public.st_drain_lock(p_batch int, p_fail float8, p_poison float8, p_run int DEFAULT 1)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE v_ids bigint[]; v_keys text[]; v_out text[];
BEGIN
  IF p_run > 1 THEN
    SELECT array_agg(c.id ORDER BY c.id), array_agg(c.partition_key ORDER BY c.id) INTO v_ids, v_keys
    FROM outbox.claim_locked_runs('public.st', p_batch, p_run) c;
  ELSE
    SELECT array_agg(c.id ORDER BY c.id), array_agg(c.partition_key ORDER BY c.id) INTO v_ids, v_keys
    FROM outbox.claim_locked('public.st', p_batch) c;
  END IF;
  IF v_ids IS NULL THEN RETURN 0; END IF;
  PERFORM public.st_check_claimed(v_ids, v_keys, 'lock');
  -- Per key, rows after a failed one of the same run are left untouched.
  SELECT array_agg(x.id ORDER BY x.id), array_agg(x.k ORDER BY x.id), array_agg(x.o ORDER BY x.id)
    INTO v_ids, v_keys, v_out
  FROM (SELECT y.*, count(*) FILTER (WHERE y.o <> 'sent') OVER (PARTITION BY y.k ORDER BY y.id
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS failed_before
        FROM (SELECT u.id, u.k, CASE WHEN r < p_poison THEN 'permanent' WHEN r < p_poison + p_fail THEN 'transient'
                                     ELSE 'sent' END AS o
              FROM unnest(v_ids, v_keys) u(id, k), LATERAL (SELECT random() + u.id * 0 AS r) rr) y) x
  WHERE x.failed_before = 0;
  PERFORM outbox.settle_locked('public.st', v_ids, v_out, NULL);
  INSERT INTO public.dlog (id, k, outcome, mode)
  SELECT u.id, u.k, u.o, 'lock' FROM unnest(v_ids, v_keys, v_out) u(id, k, o) ORDER BY u.id;
  RETURN cardinality(v_ids);
END $$;

-- Lease mode: claim_batch in one transaction, apply_results in another (procedure COMMITs).
CREATE OR REPLACE PROCEDURE public.st_drain_lease(p_batch int, p_fail float8, p_poison float8,
                                                  p_sleep float8 DEFAULT 0, p_lease interval DEFAULT '2 seconds',
                                                  p_run int DEFAULT 1)
LANGUAGE plpgsql AS $$
DECLARE v_ids bigint[]; v_toks uuid[]; v_keys text[]; v_out text[];
BEGIN
  IF p_run > 1 THEN
    SELECT array_agg(c.id ORDER BY c.id), array_agg(c.lease_token ORDER BY c.id), array_agg(c.partition_key ORDER BY c.id)
      INTO v_ids, v_toks, v_keys FROM outbox.claim_runs('public.st', p_batch, p_lease, p_run) c;
  ELSE
    SELECT array_agg(c.id ORDER BY c.id), array_agg(c.lease_token ORDER BY c.id), array_agg(c.partition_key ORDER BY c.id)
      INTO v_ids, v_toks, v_keys FROM outbox.claim_batch('public.st', p_batch, p_lease) c;
  END IF;
  IF v_ids IS NOT NULL THEN
    PERFORM public.st_check_claimed(v_ids, v_keys, 'lease');
  END IF;
  COMMIT;
  IF v_ids IS NULL THEN RETURN; END IF;
  IF p_sleep > 0 THEN PERFORM pg_sleep(random() * p_sleep); END IF;
  SELECT array_agg(x.id ORDER BY x.id), array_agg(x.t ORDER BY x.id), array_agg(x.k ORDER BY x.id), array_agg(x.o ORDER BY x.id)
    INTO v_ids, v_toks, v_keys, v_out
  FROM (SELECT y.*, count(*) FILTER (WHERE y.o <> 'sent') OVER (PARTITION BY y.k ORDER BY y.id
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS failed_before
        FROM (SELECT u.id, u.t, u.k, CASE WHEN r < p_poison THEN 'permanent' WHEN r < p_poison + p_fail THEN 'transient'
                                          ELSE 'sent' END AS o
              FROM unnest(v_ids, v_toks, v_keys) u(id, t, k), LATERAL (SELECT random() + u.id * 0 AS r) rr) y) x
  WHERE x.failed_before = 0;
  INSERT INTO public.dlog (id, k, outcome, mode)
  SELECT u.id, u.k, u.o, 'lease'
  FROM outbox.apply_results('public.st', v_ids, v_toks, v_out) a
  JOIN unnest(v_ids, v_keys, v_out) u(id, k, o) ON u.id = a.id
  WHERE a.applied ORDER BY u.id;
  COMMIT;
END $$;
-- The violation itself, seen by the claiming transaction right after its claim (a new statement,
-- a newer snapshot): a pending row of a claimed row's key below it that this batch did not claim.
-- A row visible now was visible to the claim: a row of the key with a smaller id that commits later
-- is renumbered past every committed one (docs/ordering.md), and one whose commit step came before
-- the claimed row's was visible before that row was. Logged with the key's head, wake notes and the
-- older row's xmin, in the claiming transaction (lost if it rolls back).
CREATE TABLE public.claimcheck (at timestamptz DEFAULT clock_timestamp(), mode text, claimed bigint, k text,
  older bigint, older_xmin text, older_status text, older_attempts int, older_next timestamptz,
  head jsonb, wakes jsonb, claim_xid xid8 DEFAULT pg_current_xact_id());
CREATE OR REPLACE FUNCTION public.st_check_claimed(p_ids bigint[], p_keys text[], p_mode text) RETURNS void
LANGUAGE sql AS $f$
  INSERT INTO public.claimcheck (mode, claimed, k, older, older_xmin, older_status, older_attempts, older_next, head, wakes)
  SELECT p_mode, c.id, c.k, o.id, o.xmin::text, pg_xact_status(o.xmin::text::xid8), o.attempt_count, o.next_attempt_at,
         (SELECT to_jsonb(h) || jsonb_build_object('xmin', h.xmin::text, 'xmax', h.xmax::text)
          FROM outbox.partition_heads h JOIN outbox.queues q USING (queue_id) WHERE q.queue = 'public.st' AND h.partition_key = c.k),
         (SELECT jsonb_agg(to_jsonb(w) || jsonb_build_object('xmin', w.xmin::text)) FROM outbox.partition_wakes w
            JOIN outbox.queues q USING (queue_id) WHERE q.queue = 'public.st' AND w.partition_key = c.k)
  FROM unnest(p_ids, p_keys) AS c(id, k)
  JOIN LATERAL (SELECT s.id, s.xmin, s.attempt_count, s.next_attempt_at FROM public.st s
                WHERE s.k = c.k AND s.sent_at IS NULL AND s.attempt_count < 5 AND s.id < c.id
                  AND s.id <> ALL (p_ids) ORDER BY s.id LIMIT 1) o ON true
$f$;
CREATE TABLE public.hsample (at timestamptz, partition_key text, head_id bigint, parked_until timestamptz, floor_id bigint);
-- Dry-run repair that, on a finding, also records what it saw around the key (new statements,
-- so a slightly newer snapshot): the key's head, its wake notes, its pending rows with xmin.
CREATE TABLE public.repdump (at timestamptz DEFAULT clock_timestamp(), finding text, what text, data jsonb);
CREATE OR REPLACE FUNCTION public.st_repair() RETURNS int LANGUAGE plpgsql AS $$
DECLARE r record; n int := 0;
BEGIN
  FOR r IN SELECT * FROM outbox.repair('public.st', true) LOOP
    n := n + 1;
    INSERT INTO public.replog VALUES (clock_timestamp(), r.partition_key, r.cause, r.head_id, r.detail);
    INSERT INTO public.repdump (finding, what, data)
    SELECT r.detail, 'head', to_jsonb(h) || jsonb_build_object('xmin', h.xmin::text, 'xmax', h.xmax::text) FROM outbox.partition_heads h
      JOIN outbox.queues q USING (queue_id) WHERE q.queue = 'public.st' AND h.partition_key = r.partition_key
    UNION ALL
    SELECT r.detail, 'wake', to_jsonb(w) FROM outbox.partition_wakes w
      JOIN outbox.queues q USING (queue_id) WHERE q.queue = 'public.st' AND w.partition_key = r.partition_key
    UNION ALL
    SELECT r.detail, 'row', jsonb_build_object('id', t.id, 'xmin', t.xmin::text, 'created_at', t.created_at, 'sent_at', t.sent_at,
             'attempt_count', t.attempt_count, 'event_type', t.event_type, 'xmin_status', pg_xact_status(t.xmin::text::xid8))
      FROM (SELECT s.*, s.xmin FROM public.st s WHERE s.k = r.partition_key ORDER BY s.id DESC LIMIT 12) t
    UNION ALL
    SELECT r.detail, 'dlog', to_jsonb(d) FROM (SELECT * FROM public.dlog WHERE k = r.partition_key ORDER BY seq DESC LIMIT 8) d;
  END LOOP;
  RETURN n;
END $$;
