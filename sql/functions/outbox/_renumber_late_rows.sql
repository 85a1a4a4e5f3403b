-- Gives this transaction's pending rows of the late keys new ids from the queue's id sequence, in
-- their order, each larger than the key's clock (the largest committed id of its hash): delivered
-- order (id order) is then commit order (see outbox._commit_partitions). A sequence with CACHE > 1
-- hands this session values from its own cache, which may lie below ids other sessions already
-- committed: values not above the clock are drawn and dropped until one is (at most the cache
-- size; the clock never exceeds the sequence's last value, see the caller).
-- Skipped (the key keeps id order) only when the sequence is behind the clock, which means it was
-- set back by hand (setval, ALTER SEQUENCE RESTART): a new id must not collide with a later default.
-- Returns each renumbered key with its new smallest and largest id.
-- Arguments: the queue's id sequence (NULL: none), the late keys, and for each (aligned arrays)
-- this transaction's smallest and largest id and the key's clock as the caller read it.
CREATE OR REPLACE FUNCTION outbox._renumber_late_rows(p_q outbox.queues, p_sequence regclass, p_keys text[],
                                                      p_los bigint[], p_his bigint[], p_clocks bigint[])
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table regclass := p_q.table_oid::regclass;
  v_ids bigint[];
  v_old bigint;
  v_new bigint;
  i integer;
BEGIN
  IF p_sequence IS NULL THEN
    RETURN;
  END IF;
  FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
    CONTINUE WHEN COALESCE(pg_catalog.pg_sequence_last_value(p_sequence), 0) < p_clocks[i];

    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
       WHERE t.%I = $1::%s AND t.id BETWEEN $2 AND $3 AND t.sent_at IS NULL
         AND outbox._written_here(t.xmin)', v_table, p_q.partition_column, p_q.partition_type)
      INTO v_ids USING p_keys[i], p_los[i], p_his[i];
    CONTINUE WHEN v_ids IS NULL;

    k := p_keys[i];
    lo := NULL;
    v_new := pg_catalog.nextval(p_sequence);
    WHILE v_new <= p_clocks[i] LOOP
      v_new := pg_catalog.nextval(p_sequence);
    END LOOP;
    FOREACH v_old IN ARRAY v_ids LOOP
      IF v_old <> v_ids[1] THEN
        v_new := pg_catalog.nextval(p_sequence);
      END IF;
      EXECUTE pg_catalog.format('UPDATE %s SET id = $2 WHERE id = $1', v_table) USING v_old, v_new;
      lo := COALESCE(lo, v_new);
    END LOOP;
    hi := v_new;
    RETURN NEXT;
  END LOOP;
END;
$$;
