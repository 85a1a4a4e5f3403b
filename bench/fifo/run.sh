#!/bin/bash
# run.sh SECONDS PROD_CLIENTS PROD_RATE DRAIN_CLIENTS [PROD_SCRIPTS] [DRAIN_SCRIPTS]
# Runs producers and drains as two pgbench instances (-j 1 each) in 20 s chunks, pausing
# while /tmp/bench-running exists; then drains out and prints check.sql.
cd "$(dirname "$0")"
secs=$1; pc=$2; rate=$3; dc=$4
prod=${5:-"-f produce_slow.sql@4 -f produce_fast.sql@2 -f produce_multi.sql@1"}
drain=${6:-"-f drain_lock.sql@3 -f drain_lease.sql@3 -f repair.sql@1"}
done_s=0
while [ $done_s -lt $secs ]; do
  while [ -e /tmp/bench-running ]; do sleep 5; done
  if [ -n "${UNTIL:-}" ] && [ "$(date -u +%H%M)" -ge "$UNTIL" ]; then echo "time limit"; break; fi
  pgbench -n -j 1 -D nkeys=${NKEYS:-6} -c $pc -R $rate -T 20 $prod "$DATABASE_URL" > /tmp/pgq/prod.out 2>&1 &
  p1=$!
  pgbench -n -j 1 -c $dc -R ${DRATE:-400} -T 20 $drain "$DATABASE_URL" > /tmp/pgq/drain.out 2>&1 &
  p2=$!
  wait $p1 $p2
  grep -h "number of failed transactions\|^tps\|aborted" /tmp/pgq/prod.out /tmp/pgq/drain.out | grep -v ": 0 (0.000%)" | head -4
  done_s=$((done_s + 20))
done
# drain out (no producers): until nothing is pending, at most 90 s
for i in $(seq 1 18); do
  n=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM public.st WHERE sent_at IS NULL AND attempt_count < 5")
  [ "$n" = 0 ] && break
  pgbench -n -j 1 -c 4 -T 5 $drain "$DATABASE_URL" > /tmp/pgq/drainout.out 2>&1
done
echo "pending after drain-out: $n"
psql "$DATABASE_URL" -f check.sql
