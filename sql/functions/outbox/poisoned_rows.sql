-- The poisoned rows of a queue for an operator's page: newest first, at most max_rows (1..1000),
-- below before_id when given (the next page). Read through the claim index (attempt_count at
-- max_attempts among unsent rows), so a page never walks the pending backlog. Ordered by id alone:
-- poisoned rows need not share one attempt_count (a max_attempts lowered since leaves rows above
-- it), and ordered by (attempt_count, id) a page below before_id skipped the rows of a smaller
-- count that came after it. The ids first (from the index), then their rows. payload_preview (the
-- payload's first 200 characters) only for a caller whose login role may read the queue table's
-- payload column; NULL otherwise (operators are not granted payloads, docs/security.md).
-- The ids come from one backward scan of the claim index per attempt count present among poisoned
-- rows (found by skipping from one count to the next: usually one), merged: "ORDER BY id DESC"
-- over them all let the planner walk the primary key backwards through every sent row newer than
-- the poisoned ones (1.2-3 s a page with 300,000 poisoned rows under 1.5M sent ones). A payload
-- that may be large is not read for its preview (its stored size is said instead): one stored in
-- more than 64 kB, or compressed into more than 4 kB (a compressed 39 kB held 10 MB of text):
-- turning a 10 MB payload into text to keep 200 characters cost 0.1-0.4 s a row, and a page of
-- them timed out.
CREATE OR REPLACE FUNCTION outbox.poisoned_rows(queue text, max_rows integer DEFAULT 50, before_id bigint DEFAULT NULL)
RETURNS TABLE(id bigint, event_id uuid, event_type text, partition_key text, attempt_count integer,
              last_error text, created_at timestamptz, payload_preview text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
SET enable_seqscan = off
-- (enable_seqscan = off makes a plan that cannot avoid a scan cost about 1e10, past the JIT
-- thresholds: it was compiled on every call, 0.15-1.6 s.)
SET jit = off
SET enable_bitmapscan = off
AS $$
DECLARE
  fn constant text := 'poisoned_rows';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_payload boolean;
BEGIN
  IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('max_rows must be between 1 and 1000, got %s',
                                                  COALESCE(max_rows::text, 'NULL')));
  END IF;
  v_payload := pg_catalog.has_column_privilege(session_user, v_q.table_oid, 'payload', 'SELECT');
  RETURN QUERY EXECUTE pg_catalog.format(
    'WITH RECURSIVE counts(c) AS (
       (SELECT p.attempt_count FROM %3$s p WHERE p.sent_at IS NULL AND p.attempt_count >= $1
        ORDER BY p.attempt_count LIMIT 1)
       UNION ALL
       SELECT (SELECT p.attempt_count FROM %3$s p WHERE p.sent_at IS NULL AND p.attempt_count > counts.c
               ORDER BY p.attempt_count LIMIT 1)
       FROM counts WHERE counts.c IS NOT NULL)
     SELECT t.id, %1$s, t.event_type, %2$s, t.attempt_count, t.last_error, t.created_at,
            CASE WHEN NOT $4 THEN NULL
                 WHEN pg_catalog.pg_column_size(t.payload) > 65536
                   OR pg_catalog.pg_column_compression(t.payload) IS NOT NULL AND pg_catalog.pg_column_size(t.payload) > 4096
                 THEN pg_catalog.format(''(a payload of %%s bytes stored: not shown)'', pg_catalog.pg_column_size(t.payload))
                 ELSE pg_catalog.left(t.payload::text, 200) END
     FROM %3$s t
     WHERE t.id = ANY (ARRAY(
       SELECT x.id FROM counts
       CROSS JOIN LATERAL (SELECT p.id FROM %3$s p
                           -- A range, not =: with an equality the order by id alone let the
                           -- planner walk the primary key backwards through the sent rows again.
                           WHERE p.sent_at IS NULL AND p.attempt_count >= counts.c AND p.attempt_count <= counts.c
                             AND ($2::bigint IS NULL OR p.id < $2)
                           ORDER BY p.attempt_count DESC, p.id DESC LIMIT $3) x
       WHERE counts.c IS NOT NULL
       ORDER BY x.id DESC LIMIT $3))
     ORDER BY t.id DESC',
    outbox._event_id_of(v_q),
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    v_q.table_oid::regclass)
    USING v_q.max_attempts, before_id, max_rows, v_payload;
END;
$$;
