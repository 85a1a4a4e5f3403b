-- Unpartitioned queues that notify 'when_waiting' get their NOTIFY trigger again, naming their
-- drainers' waiting sequence instead of carrying its oid (which a restore does not keep); every
-- registered queue table gets the CHECK on next_attempt_at (NOT VALID: rows written before keep
-- their time).
DO $$
DECLARE
  v_q outbox.queues;
BEGIN
  FOR v_q IN SELECT * FROM outbox.queues q
             WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
             ORDER BY q.queue_id LOOP
    PERFORM outbox._install_notify_trigger(v_q);
    PERFORM outbox._guard_next_attempt_at(v_q.table_oid, v_q.max_delay, false, false);
  END LOOP;
END;
$$;
