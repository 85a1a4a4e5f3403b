-- (Re)creates the triggers of a queue table: pgdrain_notify (NOTIFY per statement) and, when the
-- queue is partitioned, pgdrain_heads (notes each statement's keys) and pgdrain_commit (the commit
-- step, see outbox.tg_queue__commit). pgdrain_commit's WHEN clause queues it for the first row of a
-- transaction only: it arms a transaction-local setting, which the commit step disarms, so one
-- firing per transaction costs one setting lookup per row.
CREATE OR REPLACE FUNCTION outbox._queue_triggers(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  v_rel regclass := p_q.table_oid::regclass;
BEGIN
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
       EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, p_q.channel, p_q.queue);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_commit ON %s', v_rel);
  IF p_q.partition_column IS NULL THEN
    RETURN;
  END IF;
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION outbox.tg_queue__heads(%s, %L)',
    v_rel, p_q.queue_id, p_q.partition_column);
  EXECUTE pg_catalog.format(
    'CREATE CONSTRAINT TRIGGER pgdrain_commit AFTER INSERT ON %s DEFERRABLE INITIALLY DEFERRED
       FOR EACH ROW
       WHEN (pg_catalog.current_setting(''pgdrain.commit_armed'', true) IS DISTINCT FROM ''on''
             AND pg_catalog.set_config(''pgdrain.commit_armed'', ''on'', true) = ''on'')
       EXECUTE FUNCTION outbox.tg_queue__commit()', v_rel);
END;
$$;
