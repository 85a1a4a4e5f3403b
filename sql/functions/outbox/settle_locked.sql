-- Lock mode: records outcomes for rows this transaction claimed with claim_locked and still holds.
-- Refuses (SQLSTATE 55000, nothing changed) any id this transaction does not hold: the id must be
-- in claim_locked's list for this transaction and its row lock must be this transaction's, taken at
-- the top level or in a savepoint that is still open or was released (a rolled-back savepoint
-- took its lock, and its part of the list, with it). Returns how many rows were recorded. A
-- settled row leaves the held set, so it is recorded at most once per claim: settling it again is
-- refused like any row not held (else a second 'transient' would count a second attempt).
CREATE OR REPLACE FUNCTION outbox.settle_locked(queue text, ids bigint[], outcomes text[], errors text[] DEFAULT NULL,
                                                retry_at timestamptz[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'settle_locked';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_held bigint[];
  v_foreign bigint;
  v_count bigint;
BEGIN
  PERFORM outbox._check_outcomes(fn, ids, outcomes, errors);
  PERFORM outbox._check_retry_at(fn, ids, outcomes, retry_at);
  PERFORM outbox._check_delay(fn, 'retry_at', v_q, retry_at, true);
  IF pg_catalog.cardinality(ids) = 0 THEN
    RETURN 0;
  END IF;
  v_held := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting('pgdrain.held_' || v_q.queue_id, true), ''), ',')::bigint[];
  -- NOT IN a subquery: a hashed subplan, linear in the ids (<> ALL compared every id with every held
  -- one).
  SELECT x INTO v_foreign FROM pg_catalog.unnest(ids) x
  WHERE x NOT IN (SELECT h FROM pg_catalog.unnest(v_held) AS h) LIMIT 1;
  IF NOT FOUND THEN
    -- The setting is only a list any session could SET LOCAL: the row lock itself must be ours
    -- too (outbox._locked_here: claim_locked's FOR UPDATE, in this transaction or one of its
    -- live savepoints).
    v_foreign := outbox._locked_here(v_q, ids);
  END IF;
  IF v_foreign IS NOT NULL THEN
    RAISE EXCEPTION '%: row % of % is not held by this transaction (claim it with claim_locked in the same transaction)',
      fn, v_foreign, v_q.queue USING ERRCODE = '55000';
  END IF;
  v_count := pg_catalog.cardinality(outbox._record(v_q, ids, NULL, outcomes,
    COALESCE(errors, pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ids)])), retry_at));
  PERFORM pg_catalog.set_config('pgdrain.held_' || v_q.queue_id,
    COALESCE((SELECT pg_catalog.string_agg(h::text, ',') FROM pg_catalog.unnest(v_held) h
              WHERE h NOT IN (SELECT i FROM pg_catalog.unnest(ids) AS i)), ''),
    true);
  RETURN v_count;
END;
$$;
