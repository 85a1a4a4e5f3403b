-- A queue without a partition column: no order between events, the most parallelism.
SELECT outbox.create_queue('public.jobs');
INSERT INTO public.jobs (event_type, payload)
SELECT 'thumbnail.requested', jsonb_build_object('image', i) FROM generate_series(1, 5) i;

-- Lease a batch, deliver it, record every outcome in one round trip.
CREATE TEMP TABLE claimed AS
  SELECT * FROM outbox.claim_batch('public.jobs', batch_size => 100, lease => '30 seconds');
SELECT * FROM outbox.apply_results('public.jobs',
  ARRAY(SELECT id FROM claimed ORDER BY id),
  ARRAY(SELECT lease_token FROM claimed ORDER BY id),
  ARRAY(SELECT 'sent' FROM claimed ORDER BY id));
