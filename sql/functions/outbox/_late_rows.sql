-- Lateness as a READ COMMITTED commit step sees it, with its commit locks taken (outbox._commit_keys):
-- per key (aligned with p_keys; p_los and p_his our smallest and largest id of each), the largest id
-- of a row of the key that another transaction committed above our smallest, NULL when there is
-- none: our rows must be renumbered past it. Delivered rows count too, so that a key's ids never go
-- down in delivery order. Read from the queue table itself, so that the commit locks need not write
-- a clock (docs/ordering.md): one range of the primary key, from our smallest id to the last id the
-- sequence gave out, whose rows all came after ours; our own rows are known by xmin, and other
-- transactions' uncommitted rows are not visible.
-- The range holds every row any producer wrote since our first one. When it is long (a transaction
-- that stayed open while thousands of other rows were written) every key is taken for late, past
-- the last id given out: renumbering our rows costs less than reading all of theirs, and is always
-- right (a new id is larger than every id given out so far).
--
-- The statement names the queue's table, so it runs in a function made for the queue and its
-- table as registered and named now (outbox._late_rows_function), which keeps its plan for the
-- session. This runs on every producer's commit, so it calls the function directly (one EXECUTE of
-- a call) instead of going through outbox._prepared.
CREATE OR REPLACE FUNCTION outbox._late_rows(p_q outbox.queues, p_keys text[], p_los bigint[], p_his bigint[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_issued constant bigint := pg_catalog.pg_sequence_last_value(p_q.id_sequence);
  v_from bigint := p_los[1];
  v_to bigint := p_his[1];
  v_own bigint := 1;
  v_late bigint[];
BEGIN
  -- One key (the usual transaction): simple expressions only, no query.
  IF pg_catalog.cardinality(p_los) > 1 THEN
    SELECT pg_catalog.min(x.id), pg_catalog.max(x.id), pg_catalog.count(DISTINCT x.id) INTO v_from, v_to, v_own
    FROM unnest(p_los || p_his) AS x(id);
  END IF;
  -- No id given out since ours, or every id from our first to the last given out is one of ours
  -- (one statement of many rows, no other producer between): nobody can have committed a larger
  -- one. (Ids are the primary key: an id of ours is nobody else's.)
  IF v_issued IS NULL OR v_from IS NULL OR v_issued <= v_from
     OR (v_issued <= v_to AND v_own = v_to - v_from + 1) THEN
    RETURN NULL;
  END IF;
  IF v_issued - v_from > 4096 + 2 * (v_to - v_from) THEN
    RETURN pg_catalog.array_fill(v_issued, ARRAY[pg_catalog.cardinality(p_keys)]);
  END IF;
  EXECUTE outbox._late_rows_function(p_q) INTO v_late
    USING p_keys, p_los, pg_catalog.pg_current_xact_id()::text::bigint, v_from, v_issued;
  RETURN v_late;
END;
$$;
