#!/bin/bash
# baseline.sh ROUNDS SECONDS: tamper.sh's recipe (slow producers, lock-mode drains, dry-run repairs
# with dumps) with NO tampering between rounds.
cd "$(dirname "$0")"
for r in $(seq 1 $1); do
  while [ -e /tmp/bench-running ]; do sleep 5; done
  if [ -n "${UNTIL:-}" ] && [ "$(date -u +%H%M)" -ge "$UNTIL" ]; then echo "time limit"; break; fi
  echo "== round $r $(date -u +%T)"
  pgbench -n -j 1 -c 10 -D nkeys=${NKEYS:-6} -T $2 ${PROD:--f produce_slow.sql@2} -f drain_lock_plain.sql@6 -f repair2.sql@3 "$DATABASE_URL" > /tmp/pgq/base.out 2>&1
  grep -h "^tps\|failed trans\|abort" /tmp/pgq/base.out | head -3
  psql "$DATABASE_URL" -f check.sql | sed -n '3,12p'
done
