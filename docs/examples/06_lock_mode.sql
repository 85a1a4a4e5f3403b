-- Lock mode: one transaction claims, delivers and records; the row lock is the fence and each
-- row is written once. Keep it for fast peers: the transaction stays open while you deliver.
INSERT INTO public.jobs (event_type, payload) VALUES ('thumbnail.requested', '{"image": 6}');
BEGIN;
CREATE TEMP TABLE held ON COMMIT DROP AS
  SELECT * FROM outbox.claim_locked('public.jobs', batch_size => 100);
-- ... deliver each held row here ...
SELECT outbox.settle_locked('public.jobs',
  ARRAY(SELECT id FROM held ORDER BY id), ARRAY(SELECT 'sent' FROM held ORDER BY id));
COMMIT;
