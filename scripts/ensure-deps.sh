#!/usr/bin/env bash
# Makes sure the PostgreSQL binaries, pgTAP, pg_prove, Python's psycopg2 (for the example
# worker in examples/python, run by gocheck), pgbouncer (gocheck/pgbouncer_test.go starts its
# own; the system service is not used), Chromium (the console's end-to-end test drives
# `pgdrain web` with headless chromium) and gdb (gocheck/refresh_key_share_race_test.go replays a
# PostgreSQL race by stopping two backends) are here.
#
# It installs only what is missing and never upgrades or removes an installed package: an
# upgrade of postgresql-NN under running clusters breaks every new backend of theirs (plpgsql.so
# no longer matches the running server) until they are restarted. On Debian as root it asks
# dpkg-query which of the missing tools' packages are not installed, has apt-get simulate
# installing just those (--no-upgrade) and refuses, naming them, if apt would upgrade or remove
# anything installed; otherwise it says what it is about to install and installs it. Without root
# or without apt it prints exactly what to install and exits 2.
#
# Usage: scripts/ensure-deps.sh [--server] [--dry-run]
#   --server   initdb/pg_ctl are needed too (a throwaway cluster), not only psql
#   --dry-run  print the plan (what is missing, what would be installed) and exit 0; changes
#              nothing. ENSURE_DEPS_DRY_RUN=1 does the same.
set -euo pipefail
need_server=""
dry_run=${ENSURE_DEPS_DRY_RUN:-}
[ "$dry_run" = 0 ] && dry_run=""
for arg in "$@"; do
  case "$arg" in
    --server) need_server=1 ;;
    --dry-run) dry_run=1 ;;
    *) echo "usage: $0 [--server] [--dry-run]" >&2; exit 2 ;;
  esac
done
pg_major=${PG_MAJOR:-15}

bindir() {
  local d
  for d in ${PG_BINDIR:-} /usr/lib/postgresql/$pg_major/bin /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}

# Debian's python3-psycopg2 belongs to /usr/bin/python3, which may differ from python3 on PATH.
has_psycopg2() {
  local py
  for py in /usr/bin/python3 "$(command -v python3 || true)"; do
    [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import psycopg2' >/dev/null 2>&1 && return 0
  done
  return 1
}

# One line per missing tool: "what|Debian package|how elsewhere".
missing() {
  local d major=$pg_major
  d=$(bindir) || d=""
  # pgTAP for the server that is here, not a second major version beside it.
  [[ $d =~ /postgresql/([0-9]+)/bin/?$ ]] && major=${BASH_REMATCH[1]}
  if [ -z "$d" ] && [ -n "$need_server" ]; then
    echo "initdb|postgresql-$major|brew install postgresql@$major"
    echo "pgtap|postgresql-$major-pgtap|brew install pgtap" # the server to be installed needs it too
  fi
  command -v psql >/dev/null || echo "psql|postgresql-client-$major|brew install postgresql@$major"
  command -v pg_prove >/dev/null ||
    echo "pg_prove|libtap-parser-sourcehandler-pgtap-perl|cpan TAP::Parser::SourceHandler::pgTAP"
  if [ -n "$d" ] && ! compgen -G "$d/../../../../share/postgresql/*/extension/pgtap.control" >/dev/null \
     && ! compgen -G "/usr/share/postgresql/*/extension/pgtap.control" >/dev/null; then
    echo "pgtap|postgresql-$major-pgtap|brew install pgtap"
  fi
  has_psycopg2 || echo "psycopg2|python3-psycopg2|python3 -m pip install psycopg2-binary"
  # Debian installs it in /usr/sbin, which a normal user's PATH may lack.
  command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || echo "pgbouncer|pgbouncer|brew install pgbouncer"
  command -v chromium >/dev/null || command -v chromium-browser >/dev/null ||
    echo "chromium|chromium|brew install --cask chromium"
  command -v gdb >/dev/null || echo "gdb|gdb|install gdb from your system's packages"
  return 0
}

say() { echo "ensure-deps: $*" >&2; }

# installed PACKAGE: dpkg says it is installed (not merely known, removed or half-configured).
installed() {
  local status
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null) || return 1
  [[ $status == ii* ]]
}

# upgrades_in SIMULATION: the installed packages apt would upgrade or remove, one per line.
upgrades_in() {
  local line
  # "Inst pkg [installed-version] (new-version ...)" replaces an installed package.
  local upgrade='^Inst ([^ ]+) \[([^]]+)\] \(([^ ]+)'
  while IFS= read -r line; do
    if [[ $line =~ $upgrade ]]; then
      echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]} -> ${BASH_REMATCH[3]}"
    elif [[ $line =~ ^Remv\ ([^ ]+) ]]; then
      echo "${BASH_REMATCH[1]} removed"
    fi
  done <<<"$1"
}

mapfile -t gaps < <(missing)
if [ ${#gaps[@]} = 0 ]; then
  [ -n "$dry_run" ] && echo "ensure-deps: nothing is missing; would install nothing"
  exit 0
fi

whats=() debs=() elsewhere=()
for gap in "${gaps[@]}"; do
  IFS='|' read -r what deb other <<<"$gap"
  whats+=("$what")
  [[ " ${debs[*]} " == *" $deb "* ]] || debs+=("$deb")
  elsewhere+=("  $what: $other")
done

if ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
  # Not Debian: say exactly what to install.
  {
    echo "ensure-deps: missing: ${whats[*]}. Install, then run again:"
    echo "  Debian/Ubuntu: sudo apt-get install --no-upgrade --no-install-recommends ${debs[*]}"
    echo "  elsewhere (macOS with Homebrew):"
    printf '%s\n' "${elsewhere[@]}"
    echo "Or point DATABASE_URL at a PostgreSQL $pg_major+ server with the pgtap extension available."
  } >&2
  [ -n "$dry_run" ] && exit 0
  exit 2
fi

# Debian: install only the packages that are not installed.
plan=() present=()
for deb in "${debs[@]}"; do
  if installed "$deb"; then present+=("$deb"); else plan+=("$deb"); fi
done
say "missing: ${whats[*]}"
if [ ${#present[@]} -gt 0 ]; then
  # Installing them again would not help (and must not upgrade them): a PATH problem, say.
  say "installed but not found (PATH?), left alone: ${present[*]}"
fi
if [ ${#plan[@]} = 0 ]; then
  [ -n "$dry_run" ] && { echo "ensure-deps: would install nothing"; exit 0; }
  say "nothing to install; make the tools above reachable and run again"
  exit 2
fi
install=(apt-get install -y -qq --no-install-recommends --no-upgrade "${plan[@]}")

if [ -n "$dry_run" ]; then
  echo "ensure-deps: would install: ${plan[*]}"
  echo "ensure-deps: would run: ${install[*]}"
  # apt's own plan, from the package lists as they are (no apt-get update in a dry run).
  if sim=$(apt-get -s install --no-install-recommends --no-upgrade "${plan[@]}" 2>&1); then
    changed=$(upgrades_in "$sim")
    [ -n "$changed" ] && echo "ensure-deps: would refuse: apt would upgrade or remove installed packages:" && echo "$changed"
    new=0
    while IFS= read -r line; do
      if [[ $line == Inst\ * ]]; then new=$((new + 1)); fi
    done <<<"$sim"
    echo "ensure-deps: apt's plan: $new package(s) in all, with dependencies"
  else
    echo "ensure-deps: apt-get cannot plan it from the current package lists (apt-get update first?):"
    echo "$sim"
  fi
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  say "not root; install them, then run again:"
  echo "  sudo apt-get update && sudo apt-get install --no-install-recommends --no-upgrade ${plan[*]}" >&2
  exit 2
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
sim=$(apt-get -s install --no-install-recommends --no-upgrade "${plan[@]}" 2>&1) || {
  say "apt-get cannot install ${plan[*]}:"; echo "$sim" >&2; exit 2
}
changed=$(upgrades_in "$sim")
if [ -n "$changed" ]; then
  say "not installing ${plan[*]}: apt would upgrade or remove installed packages, which can break"
  say "running PostgreSQL clusters:"
  while IFS= read -r line; do echo "  $line" >&2; done <<<"$changed"
  say "install them by hand when that is safe: ${install[*]}"
  exit 2
fi
say "installing: ${plan[*]}"
# Installing pgbouncer enables its system service; where systemd runs, it starts on port 6432
# with Debian's configuration. The tests do not use it (they start their own), so stop it.
"${install[@]}" >&2
if [[ " ${plan[*]} " == *" pgbouncer "* ]] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  systemctl disable --now pgbouncer >/dev/null 2>&1 || true
fi
mapfile -t gaps < <(missing)
[ ${#gaps[@]} = 0 ] && exit 0
say "still missing after apt-get install: ${gaps[*]%%|*}"
exit 2
