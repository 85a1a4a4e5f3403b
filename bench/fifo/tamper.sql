-- The previous helper's tampering, while nothing runs: every row marked sent by hand, the
-- queue's heads deleted. Prints the derived state left behind first.
\pset pager off
SELECT (SELECT count(*) FROM outbox.partition_heads h JOIN outbox.queues q USING (queue_id) WHERE q.queue = 'public.st') AS heads,
       (SELECT count(*) FROM outbox.partition_wakes w JOIN outbox.queues q USING (queue_id) WHERE q.queue = 'public.st') AS wakes,
       (SELECT count(*) FROM outbox.commit_hooks) AS hooks, (SELECT count(*) FROM outbox.commit_notes) AS notes,
       (SELECT count(*) FROM outbox.partition_heads_built b JOIN outbox.queues q USING (queue_id) WHERE q.queue = 'public.st') AS built,
       (SELECT count(*) FROM public.st WHERE sent_at IS NULL) AS unsent,
       (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend') AS other_sessions;
UPDATE public.st SET sent_at = now();
DELETE FROM outbox.partition_heads WHERE queue_id = (SELECT queue_id FROM outbox.queues WHERE queue = 'public.st');
INSERT INTO public.repdump (finding, what, data) VALUES ('TAMPERED', 'marker', jsonb_build_object('max_seq', (SELECT max(seq) FROM public.dlog)));
