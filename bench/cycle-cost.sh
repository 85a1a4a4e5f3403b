#!/usr/bin/env bash
# What the server spends per event on a drain's claims and results, without a drainer: sessions
# that loop over claim 32 -> record them sent (bench/cycle-cost.sql), on a fresh database with a
# queue of 60,000 rows (partitioned: 10,000 keys, 6 rows each, interleaved), 20 warm-up cycles,
# then 1,500 cycles (48,000 events) shared by the sessions, synchronous_commit off (CPU, not the
# disk). Prints the whole machine's CPU µs per event (/proc/stat) and events/s.
# An extra SQL file is applied after the warm-up (a function's variant, to compare side by side).
# Usage:
#   scripts/with-postgres.sh --fsync -- bench/cycle-cost.sh lease|lock partitioned|unpartitioned \
#     [sessions] [run_length] [extra.sql]
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?DATABASE_URL must be set (scripts/with-postgres.sh sets it)}"
mode=${1:?lease or lock}; shape=${2:?partitioned or unpartitioned}; sessions=${3:-1}; run=${4:-1}; extra=${5:-}
db=pgdrain_cycle_cost
url=$(printf '%s' "$DATABASE_URL" | sed -E "s#/[^/?]*(\?|$)#/$db\1#")
psql -X -q "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null 2>&1
DATABASE_URL=$url go run ./cmd/goose-run up >/dev/null
sql() { psql -X -q -v ON_ERROR_STOP=1 "$url" "$@"; }
if [ "$shape" = partitioned ]; then
  sql -c "SELECT outbox.create_queue('public.cq', 'resource_id')" -c "INSERT INTO public.cq (event_type, payload, resource_id)
    SELECT 'evt', jsonb_build_object('n', g, 'pad', repeat('x', 80)), 'key-' || (g % 10000) FROM generate_series(1, 60000) g" >/dev/null
else
  sql -c "SELECT outbox.create_queue('public.cq')" -c "INSERT INTO public.cq (event_type, payload)
    SELECT 'evt', jsonb_build_object('n', g, 'pad', repeat('x', 80)) FROM generate_series(1, 60000) g" >/dev/null
fi
sql -c "VACUUM ANALYZE public.cq" -c "CHECKPOINT" -f bench/cycle-cost.sql >/dev/null
sql -c "SET synchronous_commit = off" -c "CALL public.cycle_$mode('public.cq', 20, $run)" >/dev/null 2>&1
if [ -n "$extra" ]; then sql -f "$extra" >/dev/null; fi
out=$(mktemp -d)
busy() { awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat; }
c0=$(busy); t0=$(date +%s.%N)
for i in $(seq "$sessions"); do
  sql -c "SET synchronous_commit = ${SYNC:-off}" -c "CALL public.cycle_$mode('public.cq', $((1500 / sessions)), $run)" >"$out/$i" 2>&1 &
done
wait
c1=$(busy); t1=$(date +%s.%N)
events=$(cat "$out"/* | grep -o 'events [0-9]*' | awk '{s += $2} END {print s}')
rm -rf "$out"
ticks=$(getconf CLK_TCK)
awk -v m="$mode" -v s="$shape" -v n="$sessions" -v r="$run" -v e="$events" -v c="$((c1 - c0))" -v hz="$ticks" -v t0="$t0" -v t1="$t1" -v x="${extra:+ + $(basename "$extra")}" \
  'BEGIN { printf "%s %s, %d session(s), run_length %d%s: %d events, %.1f µs CPU per event, %.0f events/s\n", m, s, n, r, x, e, c / hz * 1e6 / e, e / (t1 - t0) }'
psql -X -q "$DATABASE_URL" -c "DROP DATABASE $db WITH (FORCE)" >/dev/null 2>&1
