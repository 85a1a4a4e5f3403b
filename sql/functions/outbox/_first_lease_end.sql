-- The earliest end of a live lease among the rows the first p_limit ready heads of a partitioned
-- queue point at (NULL: none). Claims do not park the heads of the rows they lease, so this is how
-- outbox.next_due learns when an in-flight row comes back if its worker never answers. A lease
-- ending more than a day ahead is over already (a clock since set back wrote it, see outbox._claim).
CREATE OR REPLACE FUNCTION outbox._first_lease_end(p_q outbox.queues, p_limit integer)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_at timestamptz;
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.min(t.leased_until)
     FROM (SELECT h.head_id FROM outbox.partition_heads h
           WHERE h.queue_id = $1 AND h.parked_until IS NULL
           ORDER BY h.attempt_count, h.head_id LIMIT $2) h
     JOIN %s t ON t.id = h.head_id
     WHERE t.sent_at IS NULL AND t.leased_until > pg_catalog.clock_timestamp()
       AND t.leased_until <= pg_catalog.clock_timestamp() + interval ''1 day''', p_q.table_oid::regclass)
    INTO v_at USING p_q.queue_id, p_limit;
  RETURN v_at;
END;
$$;
