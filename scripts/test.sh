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
  pg_prove --dbname "$DATABASE_URL" --ext .sql "${files[@]}" || fail=1
fi

if [ "$what" = all ] || [ "$what" = go ]; then
  echo "== go test ./..."
  go test -count=1 -timeout 20m -p 2 ./... || fail=1
fi

if [ "$fail" != 0 ]; then
  echo "make test: FAILED" >&2
  exit 1
fi
echo "make test: all passed"
