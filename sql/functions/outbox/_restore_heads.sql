-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables, or recomputes them (_rebuild_heads): every partition with
-- pending rows gets its head again, searched from its floor: 0 for every head made since the crash
-- (the heads were not built, outbox._make_heads), or one a search from 0 raised since; callers
-- that recompute them (_rebuild_heads) set the floors to 0 first.
-- One part per call: keys in their order, from where the last part stopped (unlogged, as the
-- heads: a crash starts over), 500 at a time until 50 ms have passed; the part that finds no key
-- left marks the heads built. Each part commits with the claim that made it, so a deep
-- backlog is rebuilt by many short claims: in one statement, 4.3 million pending rows over 2.1
-- million keys took 26 s, longer than a drainer's ClaimTimeout, and a claim cut off rolled it all
-- back, every time (invariant 9). Meanwhile claims take what the heads there are offer: each is
-- checked against the FIFO rule from its floor, so a partial set is only incomplete, and producers
-- give new keys floor 0 until the heads are built (outbox._make_heads).
-- Heads producers made since then are kept (upsert). One part at a time per queue: a claim tries
-- the queue's rebuild lock (outbox._claim; concurrent claims do not wait for it), other callers
-- (_rebuild_heads) wait. A part NOTIFYs the queue's channel: drainers whose claims found the heads
-- incomplete meanwhile claim again at its commit, and so make the next part.
CREATE OR REPLACE FUNCTION outbox._restore_heads(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
  v_started constant timestamptz := pg_catalog.clock_timestamp();
  v_after text;
  v_keys text[];
  v_any boolean := false;
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -1);
  IF EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    RETURN;
  END IF;
  SELECT r.after_key INTO v_after FROM outbox.partition_heads_restored r WHERE r.queue_id = p_q.queue_id;
  LOOP
    -- The next keys with unsent rows (poisoned-only keys too: their refresh finds no head), one
    -- index probe each, in the column's own type and order.
    EXECUTE pg_catalog.format(
      'WITH RECURSIVE keys(k) AS (
         (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL %4$s ORDER BY t.%2$I LIMIT 1)
         UNION ALL
         SELECT (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL AND t.%2$I > keys.k ORDER BY t.%2$I LIMIT 1)
         FROM keys WHERE keys.k IS NOT NULL)
       SELECT pg_catalog.array_agg(s.k::text) FROM (SELECT keys.k FROM keys WHERE keys.k IS NOT NULL LIMIT 500) s',
      p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type,
      CASE WHEN v_after IS NOT NULL THEN pg_catalog.format('AND t.%I > $1::%s', p_q.partition_column, p_q.partition_type) END)
      INTO v_keys USING v_after;
    IF v_keys IS NULL THEN
      DELETE FROM outbox.partition_heads_restored r WHERE r.queue_id = p_q.queue_id;
      INSERT INTO outbox.partition_heads_built (queue_id) VALUES (p_q.queue_id) ON CONFLICT DO NOTHING;
      EXIT;
    END IF;
    v_any := true;
    PERFORM outbox._refresh_heads(p_q, v_keys);
    v_after := v_keys[pg_catalog.array_length(v_keys, 1)];
    IF pg_catalog.clock_timestamp() - v_started > interval '50 milliseconds' THEN
      INSERT INTO outbox.partition_heads_restored AS r (queue_id, after_key) VALUES (p_q.queue_id, v_after)
      ON CONFLICT (queue_id) DO UPDATE SET after_key = excluded.after_key;
      EXIT;
    END IF;
  END LOOP;
  IF v_any AND pg_catalog.current_setting('pgdrain.notify', true) IS DISTINCT FROM 'off' THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
END;
$$;
