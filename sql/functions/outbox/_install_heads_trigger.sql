-- Gives a partitioned queue its heads trigger: a statement-level AFTER INSERT trigger running a
-- function made for this queue, outbox.tg_queue__heads_q<queue_id>, whose one statement names the
-- partition column statically, so PL/pgSQL plans it once per session instead of on every
-- statement (a generic function would need a dynamic EXECUTE). It notes the key and id of each new
-- row in this transaction's row of outbox.commit_hooks: the statement of outbox._note_written,
-- inlined (one function call less on every producer statement), with one aggregate node (the
-- executor start of aggregates is what costs most there). Made again by every create_queue, so it
-- always matches the registration (nothing else reinstalls it: run create_queue again if it was
-- dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write outbox.commit_hooks.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  v_function constant text := 'outbox.' || pg_catalog.quote_ident('tg_queue__heads_q' || p_q.queue_id);
BEGIN
  EXECUTE pg_catalog.format(
    $f$CREATE OR REPLACE FUNCTION %1$s()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = ''
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
BEGIN
  INSERT INTO outbox.commit_hooks AS h (table_oid, keys, ids, lo, hi)
  SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id),
         pg_catalog.min(n.id), pg_catalog.max(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.min(n.id) IS NOT NULL
  ON CONFLICT (xid, table_oid) DO UPDATE
    SET keys = CASE WHEN pg_catalog.cardinality(h.keys) + pg_catalog.cardinality(EXCLUDED.keys) <= 1024
                    THEN h.keys || EXCLUDED.keys END,
        ids = CASE WHEN pg_catalog.cardinality(h.keys) + pg_catalog.cardinality(EXCLUDED.keys) <= 1024
                   THEN h.ids || EXCLUDED.ids END,
        lo = LEAST(h.lo, EXCLUDED.lo),
        hi = GREATEST(h.hi, EXCLUDED.hi);
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
END;
$$;
