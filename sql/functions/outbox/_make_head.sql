-- The head of one new key of a single-row commit step (outbox.tg_queue__commit), with its floor
-- as the caller decided it (see outbox._make_heads, which makes the heads of many keys): returns
-- whether it made it. false: another session made it meanwhile, committed (ON CONFLICT DO NOTHING)
-- or still being made by an open transaction, a claim applying wake notes or rebuilding heads
-- inside a lock-mode batch; the insert would wait on that transaction's index entry until it ends
-- (issue 29), and gives up after lock_timeout instead. The caller leaves a wake note. One plain
-- INSERT: the single-row path of a producer of new keys ran outbox._make_heads' aggregate for one
-- key (a single-row producer of new keys 0.70 -> 0.75 of the minimal commit step, fsync off).
CREATE OR REPLACE FUNCTION outbox._make_head(p_queue_id integer, p_key text, p_id bigint, p_floor bigint)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1ms'
AS $$
BEGIN
  INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
  VALUES (p_queue_id, p_key, p_id, p_floor)
  ON CONFLICT (queue_id, partition_key) DO NOTHING;
  RETURN FOUND;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END;
$$;
