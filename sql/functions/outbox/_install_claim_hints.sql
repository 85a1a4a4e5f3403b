-- Gives a partitioned queue the two hints its claims share (see outbox._claim), as UNLOGGED
-- sequences: a sequence is not versioned, so moving it on every claim leaves no dead tuple behind
-- for anyone to walk, whatever holds the xmin horizon back, and costs no WAL; after a crash both
-- start again from nothing, which only costs one scan from the front.
--   outbox.claim_front_q<queue_id>  when (epoch milliseconds) a claim last searched the ready heads
--                                   from the front: one claim per second per queue does;
--   outbox.claim_start_q<queue_id>  the fresh head id where that search stopped, moved on by every
--                                   lease-mode claim past it: a claim without a cursor of its own
--                                   starts there, past the dead entries the drain left in front, and a
--                                   lease-mode claim with one starts there when it is further.
-- Made by create_queue; dropped by drop_queue.
CREATE OR REPLACE FUNCTION outbox._install_claim_hints(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
BEGIN
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_start_q' || p_q.queue_id);
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_front_q' || p_q.queue_id);
END;
$$;
