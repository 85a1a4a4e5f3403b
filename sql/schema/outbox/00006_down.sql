-- Back to 00005: the generic heads trigger function comes back, every partitioned queue's trigger
-- calls it again, and the per-queue functions go.
-- Statement-level AFTER INSERT trigger of a partitioned queue: hands the statement's keys, with the
-- smallest and largest new id of each, to outbox._note_written, which takes the partitions' producer
-- locks and queues this transaction's commit step (ordering, renumbering, heads of new keys).
-- Nothing is written here: a producer never waits on another producer's uncommitted head.
-- Arguments: queue_id, partition column.
CREATE OR REPLACE FUNCTION outbox.tg_queue__heads()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_queue_id integer := TG_ARGV[0]::integer;
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k),
            pg_catalog.array_agg(hi ORDER BY k)
       FROM (SELECT %I::text AS k, pg_catalog.min(id) AS lo, pg_catalog.max(id) AS hi
               FROM pgdrain_new_rows WHERE sent_at IS NULL GROUP BY 1) s', TG_ARGV[1])
    INTO v_keys, v_mins, v_maxs;
  IF v_keys IS NULL THEN
    RETURN NULL;
  END IF;

  PERFORM outbox._note_written(v_queue_id, TG_RELID, v_keys, v_mins, v_maxs);
  RETURN NULL;
END;
$$;
ALTER FUNCTION outbox.tg_queue__heads() SECURITY DEFINER;
REVOKE ALL ON FUNCTION outbox.tg_queue__heads() FROM PUBLIC;
DO $down$
DECLARE
  q outbox.queues;
BEGIN
  FOR q IN SELECT * FROM outbox.queues x
           WHERE x.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(x.table_oid) IS NOT NULL
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
         FOR EACH STATEMENT EXECUTE FUNCTION outbox.tg_queue__heads(%s, %L)',
      q.table_oid::regclass, q.queue_id, q.partition_column);
  END LOOP;
  FOR q IN SELECT * FROM outbox.queues LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || q.queue_id);
  END LOOP;
END;
$down$;
DROP FUNCTION outbox._install_heads_trigger(outbox.queues);
