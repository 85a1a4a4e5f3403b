#!/bin/bash
# tamper.sh ROUNDS SECONDS: the s25 recipe (one pgbench: slow producers, lock-mode drains, dry-run
# repairs), then, with nothing running, the previous helper's tampering, then the recipe again.
cd "$(dirname "$0")"
rounds=$1; secs=$2
for r in $(seq 1 $rounds); do
  while [ -e /tmp/bench-running ]; do sleep 5; done
  if [ -n "${UNTIL:-}" ] && [ "$(date -u +%H%M)" -ge "$UNTIL" ]; then echo "time limit"; break; fi
  echo "== round $r $(date -u +%T)"
  pgbench -n -j 1 -c 10 -D nkeys=6 -T $secs -f produce_slow.sql@2 -f drain_lock_plain.sql@6 -f repair2.sql@3 "$DATABASE_URL" > /tmp/pgq/tamper.out 2>&1
  grep -h "^tps\|failed trans\|abort" /tmp/pgq/tamper.out | head -3
  psql "$DATABASE_URL" -f check.sql | sed -n '3,12p'
  echo "-- tamper"
  psql "$DATABASE_URL" -f tamper.sql
done
