-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark,
-- clocks, claim hints, statements with kept plans and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_q outbox.queues;
  v_rel regclass;
BEGIN
  -- Not outbox._queue: that refuses a registration whose table is gone, which is what this clears.
  SELECT * INTO v_q FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', fn, v_name
      USING ERRCODE = '42P01';
  END IF;
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  IF pg_catalog.pg_table_is_visible(v_q.table_oid) IS NOT NULL THEN
    v_rel := v_q.table_oid::regclass;
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_restored r WHERE r.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF v_rel IS NULL THEN
    NULL;
  ELSIF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_rel);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
  -- Its drainers' waiting mark (outbox._install_notify_trigger).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'drainer_waits_q' || v_q.queue_id);
  -- Its drainers' claim turn (outbox.claim_turn).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_turn_q' || v_q.queue_id);
  -- Its kept statements (outbox._prepared) and late-rows function (outbox._late_rows_function).
  PERFORM outbox._drop_functions('^_q' || v_q.queue_id || '_');
END;
$$;
