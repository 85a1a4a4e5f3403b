-- The NOTIFY triggers as 00024 made them (the waiting sequence by oid), no CHECK on next_attempt_at,
-- and the heads triggers as 00024 made them (notes in outbox.commit_notes only), without
-- pgdrain_snapshot.
DO $$
DECLARE
  v_q outbox.queues;
BEGIN
  FOR v_q IN SELECT * FROM outbox.queues q
             WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
             ORDER BY q.queue_id LOOP
    PERFORM outbox._install_notify_trigger(v_q);
    EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS pgdrain_next_attempt_at_within_max_delay',
                              v_q.table_oid::regclass);
    IF v_q.partition_column IS NOT NULL THEN
      PERFORM outbox._install_heads_trigger(v_q);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_q.table_oid::regclass);
    END IF;
  END LOOP;
END;
$$;
