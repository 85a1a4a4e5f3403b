-- Queues registered before this migration whose partition column can not key partitions keep
-- working as before: each is named in a warning now (and by pgdrain check), so that the upgrade
-- says so.
DO $$
DECLARE
  v_q record;
BEGIN
  FOR v_q IN SELECT q.queue, q.partition_column, outbox._key_type_problem(q.table_oid, q.partition_column) AS problem
             FROM outbox.queues q
             WHERE q.partition_column IS NOT NULL
               AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
             ORDER BY q.queue_id LOOP
    CONTINUE WHEN v_q.problem IS NULL;
    RAISE WARNING 'pgdrain: queue %: partition_column % can not key partitions reliably: %', v_q.queue,
      v_q.partition_column, v_q.problem
      USING HINT = 'Rows of one key can be delivered together or out of commit order; see docs/operations.md.';
  END LOOP;
END;
$$;
