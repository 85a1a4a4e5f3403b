-- Paces the claims of a queue's drainers together while rows trickle in (issue 29: three drainers
-- pacing each on its own claimed three times as often as one, each claim finding a third of the
-- rows, and the producers beside them paid for every claim's fixed cost). A drainer whose last
-- claim found rows but fewer than it asked for calls this before its next claim: it returns how
-- long to wait, or 0 when it is this caller's turn, which it takes (claim now). A turn is taken at
-- most once per `pause` per queue, whichever drainer asks; two that ask at the same instant may
-- both get it (a hint, not a lock). A drainer whose claims come back full does not ask.
-- The turn is the time it was last taken (epoch milliseconds, the server's clock) in the queue's
-- UNLOGGED sequence outbox.claim_turn_q<queue_id> (outbox._install_notify_trigger): no dead tuple,
-- no WAL, nothing to wait for; a queue without it (registered before it existed: call
-- outbox.set_notify again) always answers 0.
CREATE OR REPLACE FUNCTION outbox.claim_turn(queue text, pause interval)
RETURNS interval
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues;
  v_turn regclass;
  v_now_ms bigint;
  v_pause_ms bigint;
  v_last bigint;
BEGIN
  PERFORM outbox._check_span('claim_turn', 'pause', pause);
  IF pause IS NULL OR pause <= interval '0' OR pause > interval '10 seconds' THEN
    PERFORM outbox._invalid('claim_turn', pg_catalog.format(
      'pause must be positive and at most 10 seconds, got %s', COALESCE(pause::text, 'NULL')));
  END IF;
  v_q := outbox._queue('claim_turn', queue);
  v_turn := pg_catalog.to_regclass('outbox.claim_turn_q' || v_q.queue_id);
  IF v_turn IS NULL THEN
    RETURN interval '0';
  END IF;
  v_now_ms := (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint;
  v_pause_ms := GREATEST((EXTRACT(epoch FROM pause) * 1000)::bigint, 1);
  v_last := pg_catalog.pg_sequence_last_value(v_turn);
  -- A turn taken in the future (the server's clock went back) is over.
  IF v_last <= v_now_ms AND v_now_ms < v_last + v_pause_ms THEN
    RETURN (v_last + v_pause_ms - v_now_ms) * interval '1 millisecond';
  END IF;
  PERFORM pg_catalog.setval(v_turn, v_now_ms);
  RETURN interval '0';
END;
$$;
