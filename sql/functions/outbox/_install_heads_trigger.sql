-- Gives a partitioned queue its commit-step triggers:
-- - pgdrain_heads, a statement-level AFTER INSERT trigger running a function made for this queue,
--   outbox.tg_queue__heads_q<queue_id>, whose one statement names the partition column
--   statically, so PL/pgSQL plans it once per session instead of on every statement (a generic
--   function would need a dynamic EXECUTE). It notes the key and id of each new row for the commit
--   step, as outbox._note_written does; the first statement of a transaction, which inserts its
--   hook, inlined (one function call less on the usual transaction), later ones and SERIALIZABLE
--   transactions by calling it.
-- - pgdrain_snapshot, a statement-level BEFORE INSERT trigger that fires only in REPEATABLE READ
--   and SERIALIZABLE transactions (its WHEN costs a READ COMMITTED statement no function call):
--   outbox.tg_queue__snapshot_producer announces the transaction before it takes an id, so that
--   READ COMMITTED commit steps keep the clocks those transactions read (docs/ordering.md).
-- - pgdrain_key_fixed, a row-level AFTER UPDATE OF the partition column trigger that fires only
--   when an unsent row's key changes, and refuses it (outbox.tg_queue__key_fixed). AFTER, not
--   BEFORE: a table with any BEFORE UPDATE row trigger has every updated row locked first (a tuple
--   lock, WAL written) whether the trigger fires or not, and claims and results update every row
--   they take; an AFTER one costs a fetch of the old row.
-- And makes the function of the commit step's late-rows statement (outbox._late_rows_function).
-- Made again by every create_queue, so they always match the registration (nothing else
-- reinstalls the triggers: run create_queue again if one was dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write the notes.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
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
SET search_path = pg_catalog, pg_temp
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
DECLARE
  v_more boolean;
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- Noted in the hook, see outbox._note_written.
    PERFORM outbox._note_written(TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id))
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
    RETURN NULL;
  END IF;
  -- The transaction's first statement notes in its hook; later ones in outbox.commit_notes, the
  -- first of them marking the hook (true comes back only from that update; nothing from later ones).
  INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
  SELECT pg_catalog.pg_current_xact_id(), pg_catalog.array_agg(TG_RELID), pg_catalog.array_agg(n.%3$I::text),
         pg_catalog.array_agg(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.count(*) > 0
  ON CONFLICT (xid) DO UPDATE SET more_notes = true WHERE NOT h.more_notes
  RETURNING h.more_notes INTO v_more;
  IF v_more OR NOT FOUND THEN
    INSERT INTO outbox.commit_notes (table_oid, keys, ids)
    SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id)
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
  END IF;
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  -- Triggers in place are left as they are (the function above was replaced in place): dropping
  -- one locks the table (outbox._trigger_in_place).
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_heads', (v_function || '()')::regprocedure, 4, '{}',
                                  false, 'pgdrain_new_rows') THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
         FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
  END IF;
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_snapshot', 'outbox.tg_queue__snapshot_producer()', 6,
                                  ARRAY[outbox._snapshot_lock_class()::text, p_q.queue_id::text], true) THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      $f$CREATE TRIGGER pgdrain_snapshot BEFORE INSERT ON %s FOR EACH STATEMENT
         WHEN (pg_catalog.current_setting('transaction_isolation') <> 'read committed')
         EXECUTE FUNCTION outbox.tg_queue__snapshot_producer(%s, %s)$f$,
      p_q.table_oid::regclass, outbox._snapshot_lock_class(), p_q.queue_id);
  END IF;
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_key_fixed', 'outbox.tg_queue__key_fixed()', 17,
                                  ARRAY[p_q.partition_column], true) THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_key_fixed AFTER UPDATE OF %1$I ON %2$s FOR EACH ROW
         WHEN (OLD.sent_at IS NULL AND OLD.%1$I IS DISTINCT FROM NEW.%1$I)
         EXECUTE FUNCTION outbox.tg_queue__key_fixed(%3$L)',
      p_q.partition_column, p_q.table_oid::regclass, p_q.partition_column);
  END IF;
  -- The commit step's late-rows statement, made now rather than by a producer's commit, and made
  -- again in place: its name says the table and column it reads, not the statement, so a migration
  -- that changes the statement (and reinstalls these triggers, as migrations do) replaces it here.
  PERFORM outbox._late_rows_function(p_q, true);
END;
$$;
