-- After claimcheck caught a violation (setup.sql, with heads_trace.sql and track_commit_timestamp = on):
-- the first one, everything written to its key's head and notes around it with each writer's commit
-- time, and the deliveries of the key. psql "$DATABASE_URL" -f bench/fifo/analyze.sql
\pset pager off
\x off
-- The first violation seen, its key and stranded row.
SELECT at, claimed, k, older, older_xmin, head FROM public.claimcheck ORDER BY at LIMIT 1 \gset c_
SELECT :'c_at'::timestamptz AS seen, :'c_k' AS k, :'c_older' AS stranded, :'c_older_xmin' AS producer_xid,
       pg_xact_commit_timestamp(:'c_older_xmin'::xid) AS producer_committed;
-- Everything written to the key's head and notes around it, with each writer's commit time.
SELECT t.at, t.xid, pg_xact_commit_timestamp(t.xid::text::xid) AS committed, t.pid, t.tbl, t.op,
       t.old->>'head_id' AS old_head, t.old->>'floor_id' AS old_floor, t.old->>'parked_until' AS old_park,
       t.new->>'head_id' AS new_head, t.new->>'floor_id' AS new_floor, t.new->>'parked_until' AS new_park,
       t.new->>'low_id' AS low, t.top
FROM public.htrace t
WHERE t.k = :'c_k' AND t.at BETWEEN :'c_at'::timestamptz - interval '400 ms' AND :'c_at'::timestamptz + interval '20 ms'
ORDER BY t.at;
-- Deliveries of the key around it.
SELECT d.seq, d.id, d.at, d.xid, pg_xact_commit_timestamp(d.xid::text::xid) AS committed
FROM public.dlog d WHERE d.k = :'c_k' AND d.at BETWEEN :'c_at'::timestamptz - interval '400 ms' AND :'c_at'::timestamptz + interval '20 ms'
ORDER BY d.seq;
SELECT * FROM public.surelog ORDER BY at LIMIT 3;
SELECT at, cause, detail FROM public.replog ORDER BY at LIMIT 3;
