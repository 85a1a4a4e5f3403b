#!/usr/bin/env bash
# Writes the next goose migration of a module from the canonical function sources, so a migration
# always carries the full body of every function it changes (never a diff).
# Usage: scripts/new-migration.sh MODULE NAME FUNCTION...   (FUNCTION = file name without .sql, or
#        "all" for every function of the module; an optional sql/schema/MODULE/NNNNN_up.sql (and _down.sql) with the
#        same number is put first, and NNNNN_after.sql then sql/privileges/MODULE.sql last: CREATE OR
#        REPLACE FUNCTION resets SECURITY DEFINER, so every migration that replaces functions re-applies them)
# The number follows the newest file of migrations/MODULE: after the 0.1.0 baseline (outbox
# 00025_v0_1_0.sql, alr 00006_v0_1_0.sql) it is 00026 / 00007, an upgrade from 0.1.0 (gocheck
# TestUpgrade_FromBaselineWithDataInFlight applies it with data in flight).
set -euo pipefail
cd "$(dirname "$0")/.."
module=${1:?module}; name=${2:?name}; shift 2
[ $# -gt 0 ] || { echo "new-migration: name at least one function (or all)" >&2; exit 2; }
dir=migrations/$module
mkdir -p "$dir"
last=$(ls "$dir" 2>/dev/null | grep -E '^[0-9]{5}_' | sort | tail -n1 | cut -c1-5 || true)
next=$(printf '%05d' $((10#${last:-0} + 1)))
out=$dir/${next}_${name}.sql
[ -e "$out" ] && { echo "new-migration: $out exists" >&2; exit 2; }
# Every migration carries the module's version() with its own number (gocheck TestVersions_*).
version_sql=sql/functions/$module/version.sql
if [ -e "$version_sql" ]; then
  sed -i -E "s/^(  SELECT '[^']*'::text, )[0-9]+;\$/\1$((10#$next));/" "$version_sql"
  grep -qE "::text, $((10#$next));\$" "$version_sql" || { echo "new-migration: could not bump $version_sql" >&2; exit 2; }
fi
if [ "$1" = all ]; then
  mapfile -t files < <(ls sql/functions/$module/*.sql | sort)
else
  files=(); for f in "$@"; do files+=("sql/functions/$module/$f.sql"); done
  [ -e "$version_sql" ] && [[ " $* " != *" version "* ]] && files+=("$version_sql")
fi
{
  echo "-- +goose Up"
  for s in sql/schema/$module/${next}_up.sql; do
    [ -e "$s" ] || continue
    echo "-- +goose StatementBegin"; cat "$s"; echo "-- +goose StatementEnd"; echo
  done
  for f in "${files[@]}"; do
    [ -e "$f" ] || { echo "new-migration: no $f" >&2; exit 2; }
    echo "-- +goose StatementBegin"; cat "$f"; echo "-- +goose StatementEnd"; echo
  done
  for s in sql/schema/$module/${next}_after.sql sql/privileges/$module.sql; do
    [ -e "$s" ] || continue
    echo "-- +goose StatementBegin"; cat "$s"; echo "-- +goose StatementEnd"; echo
  done
  echo "-- +goose Down"
  if [ -e "sql/schema/$module/${next}_down.sql" ]; then
    echo "-- +goose StatementBegin"; cat "sql/schema/$module/${next}_down.sql"; echo "-- +goose StatementEnd"
  else
    echo "-- (fill in the Down section: restore the previous bodies from the previous migration)"
  fi
} > "$out"
echo "wrote $out"
