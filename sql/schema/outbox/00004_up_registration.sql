-- Queues registered before 00004 get what create_queue now gives a queue table (idempotent):
-- the TRUNCATE trigger (outbox.tg_queue__truncate drops the heads and clocks of a truncated table),
-- the producers' column privileges and CHECKs (outbox._guard_queue_table: NOT VALID, each read
-- only over pending rows), and their id sequence (outbox._id_sequence; NULL where there is none).
-- A registration whose table is already gone is left alone: every call on it now says so
-- (outbox._queue), and create_queue or drop_queue clears it.
DO $registration$
DECLARE
  v_q record;
BEGIN
  FOR v_q IN SELECT q.queue_id, q.table_oid::regclass AS rel, q.partition_column
             FROM outbox.queues q
             WHERE pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
             ORDER BY q.queue_id LOOP
    PERFORM outbox._guard_queue_table(v_q.rel, v_q.partition_column, true);
    UPDATE outbox.queues q SET id_sequence = outbox._id_sequence(v_q.rel) WHERE q.queue_id = v_q.queue_id;
  END LOOP;
END
$registration$;
