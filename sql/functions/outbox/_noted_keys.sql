-- The keys this transaction wrote to a partitioned queue so far, each with its smallest and largest
-- id, in key order, as outbox._note_written noted them: from the transaction-local lists, or, for a
-- transaction of many statements, from this transaction's rows in the span of ids it noted
-- (p_forget: clear the notes, as the commit step does).
CREATE OR REPLACE FUNCTION outbox._noted_keys(p_q outbox.queues, p_forget boolean)
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
  v_setting constant text := 'pgdrain.commit_' || p_q.table_oid;
  v_span constant text := NULLIF(pg_catalog.current_setting(v_setting || '_span', true), '');
BEGIN
  IF v_span IS NULL THEN
    RETURN QUERY
      SELECT u.k, pg_catalog.min(u.lo), pg_catalog.max(u.hi)
      FROM unnest(NULLIF(pg_catalog.current_setting(v_setting || '_keys', true), '')::text[],
                  NULLIF(pg_catalog.current_setting(v_setting || '_mins', true), '')::bigint[],
                  NULLIF(pg_catalog.current_setting(v_setting || '_maxs', true), '')::bigint[]) AS u(k, lo, hi)
      GROUP BY u.k ORDER BY u.k;
  ELSE
    -- Rows of the top transaction are known by their xmin; only a savepoint's need the lookup.
    RETURN QUERY EXECUTE pg_catalog.format(
      'SELECT t.%I::text, pg_catalog.min(t.id), pg_catalog.max(t.id) FROM %s t
       WHERE t.id BETWEEN $1 AND $2 AND t.sent_at IS NULL AND (t.xmin = $3 OR outbox._written_here(t.xmin))
       GROUP BY 1 ORDER BY 1', p_q.partition_column, p_q.table_oid::regclass)
      USING pg_catalog.split_part(v_span, ',', 1)::bigint, pg_catalog.split_part(v_span, ',', 2)::bigint,
            (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
  IF p_forget THEN
    PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
            pg_catalog.set_config(v_setting || '_mins', '', true),
            pg_catalog.set_config(v_setting || '_maxs', '', true),
            pg_catalog.set_config(v_setting || '_span', '', true);
  END IF;
END;
$$;
