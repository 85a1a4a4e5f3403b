-- Every head made or deleted (not updates: one per delivery, and the log slowed the drain) and every wake note written or deleted on the stress queue, with the writing transaction
-- and the clock, IN THE STRESS DATABASE ONLY (a row trigger on pgdrain's own tables): what
-- claimcheck and surelog catch can then be followed back to the transaction that removed a head
-- or a note. Slows every head write a little. Drop with
-- DROP TRIGGER st_trace ON outbox.partition_heads; DROP TRIGGER st_trace ON outbox.partition_wakes;
\set ON_ERROR_STOP on
DROP TABLE IF EXISTS public.htrace;
CREATE UNLOGGED TABLE public.htrace (at timestamptz DEFAULT clock_timestamp(), xid xid8 DEFAULT pg_current_xact_id(),
  pid int DEFAULT pg_backend_pid(), tbl text, op text, k text, old jsonb, new jsonb, top text);
CREATE INDEX ON public.htrace (k, at);
CREATE OR REPLACE FUNCTION public.st_trace_tg() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.htrace (tbl, op, k, old, new, top)
  VALUES (TG_TABLE_NAME, TG_OP, COALESCE(NEW.partition_key, OLD.partition_key),
          CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) - 'queue_id' - 'partition_key' END,
          CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) - 'queue_id' - 'partition_key' END,
          left(current_query(), 60));
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS st_trace ON outbox.partition_heads;
DROP TRIGGER IF EXISTS st_trace ON outbox.partition_wakes;
CREATE TRIGGER st_trace AFTER INSERT OR DELETE ON outbox.partition_heads
  FOR EACH ROW EXECUTE FUNCTION public.st_trace_tg();
CREATE TRIGGER st_trace AFTER INSERT OR UPDATE OR DELETE ON outbox.partition_wakes
  FOR EACH ROW EXECUTE FUNCTION public.st_trace_tg();
