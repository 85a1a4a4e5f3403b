-- Write each event in the transaction that makes the change it announces: both commit, or neither.
CREATE TABLE public.accounts (account_id text PRIMARY KEY, email text NOT NULL);

BEGIN;
INSERT INTO public.accounts VALUES ('alice', 'alice@example.com');
INSERT INTO public.account_events (event_type, payload, account_id)
VALUES ('account.created', '{"email": "alice@example.com"}', 'alice');
COMMIT;

BEGIN;
UPDATE public.accounts SET email = 'alice@example.org' WHERE account_id = 'alice';
SELECT outbox.enqueue('public.account_events', 'account.email_changed',
                      '{"email": "alice@example.org"}', 'alice');
COMMIT;

INSERT INTO public.accounts VALUES ('bob', 'bob@example');
INSERT INTO public.account_events (event_type, payload, account_id)
VALUES ('account.created', '{"email": "bob@example"}', 'bob');
