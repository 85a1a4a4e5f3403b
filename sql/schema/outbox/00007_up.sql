-- The event's stable identity, headers and a caller-chosen retry time (issue 15; DESIGN "Identity
-- and order of an event"). Functions whose arguments or results change are dropped first: a new
-- signature beside the old one would make every call with the old arguments ambiguous.
DROP FUNCTION outbox.enqueue(text, text, jsonb, text);
DROP FUNCTION outbox.claim_batch(text, integer, interval);
DROP FUNCTION outbox.claim_locked(text, integer);
DROP FUNCTION outbox.apply_result(text, bigint, uuid, text, text);
DROP FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[]);
DROP FUNCTION outbox.settle_locked(text, bigint[], text[], text[]);
DROP FUNCTION outbox._record(outbox.queues, bigint[], uuid[], text[], text[]);
