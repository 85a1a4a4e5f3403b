-- The keys a transaction's note of a partitioned queue (its row of outbox.commit_hooks, see
-- outbox._note_written) covers, each with its smallest and largest id, in key order: from the
-- note's lists, or, past their limit, from this transaction's rows in the note's span of ids.
CREATE OR REPLACE FUNCTION outbox._noted_keys(p_q outbox.queues, p_note outbox.commit_hooks)
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
BEGIN
  IF p_note.keys IS NOT NULL THEN
    RETURN QUERY
      SELECT u.k, pg_catalog.min(u.lo), pg_catalog.max(u.hi)
      FROM unnest(p_note.keys, p_note.ids, p_note.ids) AS u(k, lo, hi)
      GROUP BY u.k ORDER BY u.k;
  ELSIF p_note.lo IS NOT NULL THEN
    -- Rows of the top transaction are known by their xmin; only a savepoint's need the lookup.
    RETURN QUERY EXECUTE pg_catalog.format(
      'SELECT t.%I::text, pg_catalog.min(t.id), pg_catalog.max(t.id) FROM %s t
       WHERE t.id BETWEEN $1 AND $2 AND t.sent_at IS NULL AND (t.xmin = $3 OR outbox._written_here(t.xmin))
       GROUP BY 1 ORDER BY 1', p_q.partition_column, p_q.table_oid::regclass)
      USING p_note.lo, p_note.hi, (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
END;
$$;
CREATE CONSTRAINT TRIGGER pgdrain_commit AFTER INSERT ON outbox.commit_hooks
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox.tg_queue__commit();
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
