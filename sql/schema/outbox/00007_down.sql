-- Back to 00006: the functions get their old signatures back (below). The event_id and headers
-- columns stay on the queue tables, with their data; 00006's functions do not read them.
DROP FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid);
DROP FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid);
DROP FUNCTION outbox._enqueue(text, text, text, jsonb, text, timestamptz, jsonb, uuid);
DROP FUNCTION outbox.claim_batch(text, integer, interval);
DROP FUNCTION outbox.claim_locked(text, integer);
DROP FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz);
DROP FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]);
DROP FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]);
DROP FUNCTION outbox._record(outbox.queues, bigint[], uuid[], text[], text[], timestamptz[]);
DROP FUNCTION outbox._check_retry_at(text, bigint[], text[], timestamptz[]);
DROP FUNCTION outbox._event_id_of(outbox.queues);
DROP FUNCTION outbox._add_event_id(regclass);
