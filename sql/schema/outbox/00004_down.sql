-- Back to 00003: what 00004 added goes; the functions it replaced get their 00003 bodies back.
DROP FUNCTION outbox.repair(text, boolean);
DROP TABLE outbox.repairs;
DROP FUNCTION outbox.next_due(text);
DROP FUNCTION outbox.queue_info(text);
DROP FUNCTION outbox._note_written(integer, oid, text[], bigint[], bigint[]);
DROP FUNCTION outbox._check_one_dimension(text, text, integer);
DROP FUNCTION outbox._locked_here(regclass, bigint[]);
-- Registration follows the table / producers write an event: registered queue tables lose the
-- TRUNCATE trigger (with its function), the pgdrain_* CHECKs, and get 00003's table-level INSERT
-- grant back; the registry loses id_sequence.
DO $registration_down$
DECLARE
  v_q record;
BEGIN
  FOR v_q IN SELECT q.table_oid::regclass AS rel FROM outbox.queues q
             WHERE pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_q.rel);
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s DROP CONSTRAINT IF EXISTS pgdrain_attempt_count_not_negative,
         DROP CONSTRAINT IF EXISTS pgdrain_payload_not_json_null,
         DROP CONSTRAINT IF EXISTS pgdrain_partition_key_not_empty', v_q.rel);
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'pgdrain_producer') THEN
      EXECUTE pg_catalog.format('GRANT INSERT ON %s TO pgdrain_producer', v_q.rel);
    END IF;
  END LOOP;
END
$registration_down$;
DROP FUNCTION outbox.tg_queue__truncate();
DROP FUNCTION outbox._guard_queue_table(regclass, text, boolean);
DROP FUNCTION outbox._id_sequence(regclass);
ALTER TABLE outbox.queues DROP COLUMN id_sequence;
REVOKE EXECUTE ON FUNCTION outbox.stats(text), outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text) FROM pgdrain_worker;
