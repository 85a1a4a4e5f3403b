-- A probe of one hypothesis (FINDINGS-s25.md): a single-row producer that finds its key with no
-- head and no wake note, with the heads complete, makes the head with its own id as floor; if an
-- older row of the key is committed and pending then, that row is below the floor and a later row
-- goes first. This replaces outbox._make_head IN THE STRESS DATABASE ONLY with the same body plus
-- a look, after a head made with floor = own id, for an older pending row of the key in public.st
-- (a new statement: it sees what the producer's question saw, see setup.sql's claimcheck), logged
-- with the notes and the older row's xmin. `goose-run up` or the drift test restore the real one.
\set ON_ERROR_STOP on
DROP TABLE IF EXISTS public.surelog;
CREATE TABLE public.surelog (at timestamptz DEFAULT clock_timestamp(), k text, id bigint, older bigint,
  older_xmin text, older_status text, wakes jsonb, xid xid8 DEFAULT pg_current_xact_id());
CREATE OR REPLACE FUNCTION outbox._make_head(p_queue_id integer, p_key text, p_id bigint, p_floor bigint)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1ms'
AS $$
DECLARE v_made boolean;
BEGIN
  INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
  VALUES (p_queue_id, p_key, p_id, p_floor)
  ON CONFLICT (queue_id, partition_key) DO NOTHING;
  v_made := FOUND;
  IF v_made AND p_floor = p_id THEN
    INSERT INTO public.surelog (k, id, older, older_xmin, older_status, wakes)
    SELECT p_key, p_id, o.id, o.xmin::text, pg_xact_status(o.xmin::text::xid8),
           (SELECT jsonb_agg(to_jsonb(w)) FROM outbox.partition_wakes w WHERE w.queue_id = p_queue_id AND w.partition_key = p_key)
    FROM public.st o WHERE o.k = p_key AND o.sent_at IS NULL AND o.id < p_id ORDER BY o.id LIMIT 1;
  END IF;
  RETURN v_made;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END;
$$;
