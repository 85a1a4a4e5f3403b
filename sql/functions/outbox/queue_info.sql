-- A queue's registration as the drainers need it, so that a worker reads it through a function
-- granted to pgdrain_worker instead of needing SELECT on outbox.queues. Errors like every function
-- (42P01) when the queue is not registered.
CREATE OR REPLACE FUNCTION outbox.queue_info(queue text)
RETURNS TABLE(queue_name text, partition_column text, max_attempts integer, backoff_min interval,
              backoff_max interval, permanent_policy text, channel text, max_delay interval)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('queue_info', queue);
BEGIN
  RETURN QUERY SELECT v_q.queue, v_q.partition_column, v_q.max_attempts, v_q.backoff_min, v_q.backoff_max,
                      v_q.permanent_policy, v_q.channel, v_q.max_delay;
END;
$$;
