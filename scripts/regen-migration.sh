#!/usr/bin/env bash
# Rewrites an UNRELEASED migration from the canonical sources while it is being developed, so the
# Go tests (whose template databases are built from migrations/) see the current sql/functions.
# Usage: scripts/regen-migration.sh MODULE NUMBER NAME BASE_COMMIT
# Up:   sql/schema/MODULE/NUMBER_up.sql, every function file changed or added since BASE_COMMIT,
#       NUMBER_after.sql, sql/privileges/MODULE.sql.
# Down: NUMBER_down.sql (drops what the migration added), then BASE_COMMIT's body of every changed
#       function, NUMBER_down_after.sql, and BASE_COMMIT's privileges (CREATE OR REPLACE resets
#       SECURITY DEFINER).
# Never run it on a landed migration: migrations/SUMS pins those.
# Before v0.1.0 is tagged, a NUMBER the module's baseline (migrations/MODULE/NNNNN_v0_1_0.sql)
# already folds is rewritten the same way and then folded again (scripts/fold-baseline.sh): it goes
# to sql/history/MODULE and the baseline is regenerated. Its schema changes (NUMBER_up.sql,
# NUMBER_after.sql) must also be written into sql/schema/MODULE/baseline.sql by hand: gocheck
# TestBaseline_EqualsTheHistory names what differs.
set -euo pipefail
cd "$(dirname "$0")/.."
module=${1:?module}; num=${2:?number}; name=${3:?name}; base=${4:?base commit}
out=migrations/$module/${num}_${name}.sql
block() { echo "-- +goose StatementBegin"; cat; echo "-- +goose StatementEnd"; echo; }
changed=(); added=()
for f in $(ls sql/functions/$module/*.sql | sort); do
  if ! git cat-file -e "$base:$f" 2>/dev/null; then added+=("$f")
  elif ! git diff --quiet "$base" -- "$f"; then changed+=("$f"); fi
done
{
  echo "-- +goose Up"
  [ -e sql/schema/$module/${num}_up.sql ] && block < sql/schema/$module/${num}_up.sql
  for f in "${added[@]}" "${changed[@]}"; do block < "$f"; done
  [ -e sql/schema/$module/${num}_after.sql ] && block < sql/schema/$module/${num}_after.sql
  block < sql/privileges/$module.sql
  echo "-- +goose Down"
  [ -e sql/schema/$module/${num}_down.sql ] && block < sql/schema/$module/${num}_down.sql
  for f in "${changed[@]}"; do git show "$base:$f" | block; done
  [ -e sql/schema/$module/${num}_down_after.sql ] && block < sql/schema/$module/${num}_down_after.sql
  git show "$base:sql/privileges/$module.sql" | block
} > "$out"
(cd migrations && find . -name '*.sql' | sort | xargs sha256sum > SUMS)
echo "wrote $out (${#added[@]} added, ${#changed[@]} changed functions)"
baseline=$(find "migrations/$module" -maxdepth 1 -name '[0-9][0-9][0-9][0-9][0-9]_v0_1_0.sql' | sort | tail -n1)
if [ -n "$baseline" ] && [ $((10#$num)) -le $((10#$(basename "$baseline" | cut -c1-5))) ]; then
  echo "$out is folded into $baseline: folding again"
  scripts/fold-baseline.sh
fi
