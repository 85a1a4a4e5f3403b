-- Lease one event (psql's \gset keeps the columns as variables), deliver it, record the outcome.
-- Claims go by attempt_count, then id: alice's account.created comes first.
SELECT id, event_type, lease_token FROM outbox.claim_batch('public.account_events', 1) \gset
-- ... deliver the event to its peer here ...
SELECT outbox.apply_result('public.account_events', :id, :'lease_token', 'sent');

-- The peer answers 503 for alice's email change: transient. The row is retried after a backoff,
-- and anything alice writes later waits behind it.
SELECT id, lease_token FROM outbox.claim_batch('public.account_events', 1) \gset
SELECT outbox.apply_result('public.account_events', :id, :'lease_token', 'transient', 'HTTP 503');

-- The peer rejects bob's event for good (422): permanent. The row is poisoned, never retried,
-- and later events of bob's account go past it.
SELECT id, lease_token FROM outbox.claim_batch('public.account_events', 1) \gset
SELECT outbox.apply_result('public.account_events', :id, :'lease_token', 'permanent', 'HTTP 422: bad email');
