-- Inversions: an event (any outcome) on a row Y of key k logged after a row X > Y of k was sent
-- (when FIFO holds, once X is sent every older row of k is sent or poisoned, and never settled again).
\pset pager off
CREATE TEMP TABLE inv AS
SELECT * FROM (
  SELECT d.*, max(d.id) FILTER (WHERE d.outcome = 'sent') OVER (PARTITION BY d.k ORDER BY d.seq
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS sent_above
  FROM public.dlog d) s
WHERE s.sent_above > s.id;
SELECT 'events' AS what, count(*) FROM public.dlog
UNION ALL SELECT 'sent', count(*) FROM public.dlog WHERE outcome = 'sent'
UNION ALL SELECT 'rows', count(*) FROM public.st
UNION ALL SELECT 'pending', count(*) FROM public.st WHERE sent_at IS NULL AND attempt_count < 5
UNION ALL SELECT 'poisoned', count(*) FROM public.st WHERE sent_at IS NULL AND attempt_count >= 5
UNION ALL SELECT 'inversions', count(*) FROM inv
UNION ALL SELECT 'pending_below_sent', count(*) FROM public.st y
  JOIN (SELECT k, max(id) AS m FROM public.st WHERE sent_at IS NOT NULL GROUP BY k) x ON x.k = y.k
  WHERE y.sent_at IS NULL AND y.attempt_count < 5 AND y.id < x.m
UNION ALL SELECT 'repair_findings', count(*) FROM public.replog
UNION ALL SELECT 'claimed_past_an_older_row', count(*) FROM public.claimcheck;
SELECT k, count(*) FILTER (WHERE outcome = 'sent') AS sent, count(*) AS events,
       count(*) FILTER (WHERE outcome = 'transient') AS transient, count(*) FILTER (WHERE outcome = 'permanent') AS poison
FROM public.dlog GROUP BY k ORDER BY k;
SELECT cause, count(*) FROM public.replog GROUP BY cause;
SELECT * FROM inv ORDER BY seq LIMIT 20;
SELECT * FROM public.replog ORDER BY at LIMIT 20;
SELECT * FROM public.claimcheck ORDER BY at LIMIT 20;
SELECT * FROM public.surelog ORDER BY at LIMIT 20;
