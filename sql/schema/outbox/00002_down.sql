-- Gives every outbox function back to PUBLIC as security invoker, as before 00002. The roles stay:
-- they are cluster-wide and other databases may still use them.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text) SECURITY INVOKER;
ALTER FUNCTION outbox.tg_queue__heads() SECURITY INVOKER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY INVOKER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text) SECURITY INVOKER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[]) SECURITY INVOKER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY INVOKER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY INVOKER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY INVOKER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[]) SECURITY INVOKER;
ALTER FUNCTION outbox.stats(text) SECURITY INVOKER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY INVOKER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY INVOKER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY INVOKER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY INVOKER;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM pgdrain_worker, pgdrain_producer, pgdrain_operator;
REVOKE ALL ON outbox.queues FROM pgdrain_operator;
REVOKE ALL ON SCHEMA outbox FROM pgdrain_worker, pgdrain_producer, pgdrain_operator;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox TO PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox GRANT EXECUTE ON FUNCTIONS TO PUBLIC;
