#!/usr/bin/env bash
# Measures which PostgreSQL settings end a session whose client vanished in a real network
# partition (no FIN, no RST: the client's link goes down) while the session holds a row lock, idle
# in a transaction as a lock-mode claim transaction is while its batch is applied. This is what
# docs/failover.md quotes. gocheck/partition_test.go cannot show it: its proxy's kernel answers the
# server's keepalive probes and retransmissions.
#
# Needs root, iproute2 and veth (two network namespaces joined by a veth pair; nothing outside
# them is touched) and PostgreSQL's server binaries. Not part of make test. Takes about 5 minutes.
# Usage: sudo scripts/partition-server-timeouts.sh [seconds to wait for a session that stays, default 30]
set -euo pipefail
wait_max=${1:-30}
pg_major=${PG_MAJOR:-15}
bin=${PG_BINDIR:-/usr/lib/postgresql/$pg_major/bin}
[ "$(id -u)" = 0 ] || { echo "partition-server-timeouts: needs root (network namespaces)" >&2; exit 2; }
command -v ip >/dev/null || { echo "partition-server-timeouts: needs ip (iproute2)" >&2; exit 2; }
[ -x "$bin/initdb" ] || { echo "partition-server-timeouts: no initdb in $bin (set PG_BINDIR)" >&2; exit 2; }

ns=pgdrain-pt-$$
srv=$ns-srv cli=$ns-cli
dir=$(mktemp -d -t pgdrain-pt-XXXXXX)
owner=postgres
id -u "$owner" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$owner"
chown "$owner" "$dir"
cleanup() {
  ip netns exec "$srv" runuser -u "$owner" -- "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  jobs -p | xargs -r kill 2>/dev/null || true
  ip netns del "$cli" 2>/dev/null || true
  ip netns del "$srv" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

ip netns add "$srv"
ip netns add "$cli"
ip link add pt-srv netns "$srv" type veth peer name pt-cli netns "$cli"
ip -n "$srv" addr add 10.201.0.1/24 dev pt-srv
ip -n "$cli" addr add 10.201.0.2/24 dev pt-cli
for n in "$srv" "$cli"; do ip -n "$n" link set lo up; done
ip -n "$srv" link set pt-srv up
ip -n "$cli" link set pt-cli up

runuser -u "$owner" -- "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-locale >/dev/null
echo "host all all 10.201.0.0/24 trust" >>"$dir/data/pg_hba.conf"
ip netns exec "$srv" runuser -u "$owner" -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
  -o "-c listen_addresses=10.201.0.1 -k $dir -c log_min_messages=info" start >/dev/null
local_sql() { ip netns exec "$srv" "$bin/psql" -X -q -A -t -h "$dir" -U postgres -d postgres -c "$1"; }
local_sql "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)"
echo "PostgreSQL $(local_sql 'SHOW server_version'); kernel keepalive $(cat /proc/sys/net/ipv4/tcp_keepalive_time)s +" \
  "$(cat /proc/sys/net/ipv4/tcp_keepalive_probes)x$(cat /proc/sys/net/ipv4/tcp_keepalive_intvl)s, tcp_retries2=$(cat /proc/sys/net/ipv4/tcp_retries2)"

# run NAME OPTIONS [STATEMENT]: a client takes the row lock in a transaction (and then runs
# STATEMENT, which is running when the partition starts: its answer is sent into the partition),
# the client's link goes down; how long until the server ends the session and frees the lock?
run() {
  local name=$1 opts=$2 stmt=${3:-} t0 t1 gone="" client
  mkfifo "$dir/in"
  ip netns exec "$cli" "$bin/psql" -X -q "host=10.201.0.1 user=postgres dbname=postgres application_name=$name options='$opts'" \
    <"$dir/in" >/dev/null 2>&1 &
  client=$!
  exec 3>"$dir/in"
  echo "BEGIN; SELECT id FROM t WHERE id = 1 FOR UPDATE;" >&3
  [ -n "$stmt" ] && echo "$stmt" >&3
  for _ in $(seq 100); do
    [ "$(local_sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$name' AND state = 'idle in transaction'")" = 1 ] && break
    [ -n "$stmt" ] && [ "$(local_sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$name' AND state = 'active'")" = 1 ] && break
    sleep 0.1
  done
  sleep 0.5
  ip -n "$cli" link set pt-cli down # the partition: the client sends and receives nothing more, and closes nothing
  t0=$(date +%s.%N)
  while :; do
    t1=$(date +%s.%N)
    if [ "$(local_sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$name'")" = 0 ]; then gone=1; break; fi
    awk -v a="$t0" -v b="$t1" -v m="$wait_max" 'BEGIN { exit !(b - a > m) }' && break
    sleep 0.1
  done
  if [ -n "$gone" ]; then
    local_sql "BEGIN; SELECT id FROM t WHERE id = 1 FOR UPDATE NOWAIT; ROLLBACK" >/dev/null
    printf '%-40s session ended, row lock free %5.1fs after the partition began\n' "$name${opts:+: $opts}${stmt:+ ($stmt)}" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
  else
    printf '%-40s session still there, row lock held after %ss\n' "$name${opts:+: $opts}${stmt:+ ($stmt)}" "$wait_max"
    local_sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '$name'" >/dev/null
  fi
  ip -n "$cli" link set pt-cli up
  # The client may wait for ever for an answer the partition ate: end it.
  exec 3>&-
  kill "$client" 2>/dev/null || true
  wait "$client" 2>/dev/null || true
  rm -f "$dir/in"
}

run defaults ""
run idle_tx "-c idle_in_transaction_session_timeout=5000"
run keepalives "-c tcp_keepalives_idle=2 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=3"
run user_timeout "-c tcp_user_timeout=3000"
run keepalives+user_timeout "-c tcp_keepalives_idle=2 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=9 -c tcp_user_timeout=4000"
run answer_in_flight "" "SELECT pg_sleep(2);"
run answer_in_flight+user_timeout "-c tcp_user_timeout=3000" "SELECT pg_sleep(2);"
run client_check "-c client_connection_check_interval=1000" "SELECT pg_sleep(20);"
echo "server log (how each session ended):"
grep -E "could not receive|could not send|idle-in-transaction|connection to client lost|terminating" "$dir/server.log" | sed 's/^/  /' || true
