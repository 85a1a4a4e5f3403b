#!/usr/bin/env bash
# Runs a command against PostgreSQL. With DATABASE_URL set it uses that server; otherwise it starts
# a throwaway cluster (initdb in a temp dir, a random port on 127.0.0.1), exports DATABASE_URL
# for the command, and tears the cluster down afterwards, also when the command fails.
# Usage: scripts/with-postgres.sh [--fsync] -- command args...
set -euo pipefail
fsync=off
while [ $# -gt 0 ]; do
  case "$1" in
    --fsync) fsync=on; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)

if [ -n "${DATABASE_URL:-}" ]; then
  "$here/ensure-deps.sh"
  exec "$@"
fi
"$here/ensure-deps.sh" --server

pg_major=${PG_MAJOR:-15}
bin=""
for d in ${PG_BINDIR:-} /usr/lib/postgresql/$pg_major/bin /usr/lib/postgresql/*/bin; do
  [ -x "$d/initdb" ] && { bin=$d; break; }
done
[ -n "$bin" ] || { echo "with-postgres: no initdb found (set PG_BINDIR)" >&2; exit 2; }

dir=$(mktemp -d -t pgdrain-pg-XXXXXX)
as_owner=()
if [ "$(id -u)" = 0 ]; then
  # initdb refuses to run as root: the cluster belongs to an unprivileged user.
  owner=postgres
  id -u "$owner" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$owner"
  chown "$owner" "$dir"
  chmod 755 "$dir"
  as_owner=(runuser -u "$owner" --)
fi
pgdata=$dir/data
log=$dir/server.log

stop() {
  "${as_owner[@]}" "$bin/pg_ctl" -D "$pgdata" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT TERM

"${as_owner[@]}" "$bin/initdb" -D "$pgdata" -U postgres -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
  || { cat "$dir/initdb.log" >&2; exit 2; }

started=""
for _ in 1 2 3 4 5 6 7 8 9 10; do
  port=$(( 20000 + RANDOM % 40000 ))
  if "${as_owner[@]}" "$bin/pg_ctl" -D "$pgdata" -l "$log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=$fsync -c synchronous_commit=$fsync \
          -c full_page_writes=$fsync -c max_connections=${PGDRAIN_PG_MAX_CONNECTIONS:-200} -c shared_buffers=256MB \
          -c max_locks_per_transaction=128 -c max_prepared_transactions=8 -c log_min_messages=warning" start >/dev/null 2>&1; then
    started=1; break
  fi
done
[ -n "$started" ] || { echo "with-postgres: could not start a cluster" >&2; cat "$log" >&2 || true; exit 2; }

export PGDRAIN_PG_BINDIR=$bin PGDRAIN_PGDATA=$pgdata PGDRAIN_PG_OWNER=${owner:-} PGDRAIN_PG_PORT=$port PGDRAIN_PG_SOCKETDIR=$dir
"$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE pgdrain" >/dev/null
export DATABASE_URL="postgres://postgres@127.0.0.1:$port/pgdrain?sslmode=disable"
echo "with-postgres: throwaway cluster on 127.0.0.1:$port (fsync=$fsync)" >&2
set +e
"$@"
rc=$?
exit $rc
