-- Unpartitioned queues that notify 'when_waiting' get their NOTIFY trigger again, naming their
-- drainers' waiting sequence instead of carrying its oid (which a restore does not keep); every
-- registered queue table gets the CHECK on next_attempt_at (NOT VALID: rows written before keep
-- their time) and a payload check that does not read the payload on every UPDATE
-- (outbox._payload_check, NOT VALID); partitioned queues get their heads trigger again (its first
-- statement notes in the hook, which the commit step reads first) and pgdrain_snapshot (REPEATABLE
-- READ and SERIALIZABLE producers announce themselves).
DO $$
DECLARE
  v_q outbox.queues;
BEGIN
  FOR v_q IN SELECT * FROM outbox.queues q
             WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
             ORDER BY q.queue_id LOOP
    PERFORM outbox._install_notify_trigger(v_q);
    PERFORM outbox._guard_next_attempt_at(v_q.table_oid, v_q.max_delay, false, false);
    PERFORM outbox._guard_queue_table(v_q.table_oid, v_q.partition_column, true);
    IF v_q.partition_column IS NOT NULL THEN
      PERFORM outbox._install_heads_trigger(v_q);
    END IF;
  END LOOP;
END;
$$;
-- Statements this migration changed were kept in functions named for their old text.
SELECT outbox._forget_kept_statements();
