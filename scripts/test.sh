#!/usr/bin/env bash
# The whole suite against $DATABASE_URL: migrations, pgTAP (pg_prove), go test.
# Usage: scripts/test.sh [sql|go]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
: "${DATABASE_URL:?DATABASE_URL must be set (make test sets it)}"
fail=0

echo "== migrations (cmd/goose-run up)"
go run ./cmd/goose-run up

if [ "$what" = all ] || [ "$what" = sql ]; then
  echo "== pgTAP (pg_prove sql/tests)"
  psql -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL" -c "CREATE EXTENSION IF NOT EXISTS pgtap" \
    -f sql/tests/_helpers.sql >/dev/null
  mapfile -t files < <(find sql/tests -name '*.test.sql' | sort)
  # pg_prove hands its --dbname to psql as a plain name, not a URI: give it libpq variables.
  IFS='|' read -r PGHOST PGPORT PGUSER PGDATABASE < <(psql -X -A -t "$DATABASE_URL" -c \
    "SELECT coalesce(host(inet_server_addr()), current_setting('unix_socket_directories')), \
            current_setting('port'), current_user, current_database()")
  PGHOST=${PGHOST%%,*}
  if [[ "$DATABASE_URL" =~ ^postgres(ql)?://[^:@/]+:([^@/]+)@ ]]; then export PGPASSWORD="${BASH_REMATCH[2]}"; fi
  PGHOST=$PGHOST PGPORT=$PGPORT PGUSER=$PGUSER PGDATABASE=$PGDATABASE \
    pg_prove --ext .sql "${files[@]}" || fail=1
fi

if [ "$what" = all ] || [ "$what" = go ]; then
  echo "== go test ./..."
  go test -count=1 -timeout 20m -p 2 -skip '^TestChaos$' ./... || fail=1
  # The chaos drain on its own, verbose enough to show its figures.
  echo "== chaos drain (gocheck TestChaos)"
  chaos_log=$(mktemp)
  chaos_rc=0
  go test -count=1 -timeout 10m -run '^TestChaos$' -v ./gocheck >"$chaos_log" 2>&1 || chaos_rc=$?
  if [ "$chaos_rc" = 0 ]; then
    grep -E '^(--- |ok)|^chaos (lease|lock):|: chaos (lease|lock): .* calm' "$chaos_log" || true
  else
    cat "$chaos_log"; fail=1
  fi
  rm -f "$chaos_log"
fi

if [ "$fail" != 0 ]; then
  echo "make test: FAILED" >&2
  exit 1
fi
echo "make test: all passed"
