-- A lease is time; the token is ownership. Lease carol's event for 100 ms and let it run out:
INSERT INTO public.account_events (event_type, payload, account_id)
VALUES ('account.created', '{"email": "carol@example.com"}', 'carol');
SELECT id AS old_id, lease_token AS old_token
FROM outbox.claim_batch('public.account_events', 1, lease => '100 milliseconds') \gset
SELECT pg_sleep(0.2);
-- another worker leases the same row, with a new token ...
SELECT id AS new_id, lease_token AS new_token
FROM outbox.claim_batch('public.account_events', 1, lease => '30 seconds') \gset
-- ... so the first worker's late result is refused (false) and changes nothing,
SELECT outbox.apply_result('public.account_events', :old_id, :'old_token', 'sent');
-- while the current holder's is recorded (true).
SELECT outbox.apply_result('public.account_events', :new_id, :'new_token', 'sent');
