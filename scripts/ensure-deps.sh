#!/usr/bin/env bash
# Makes sure the PostgreSQL binaries, pgTAP, pg_prove, Python's psycopg2 (for the example
# worker in examples/python, run by gocheck), pgbouncer (gocheck/pgbouncer_test.go starts its
# own; the system service is not used) and Chromium (the console's end-to-end test drives
# `pgdrain web` with headless chromium) are here. On Debian as root it installs
# what is missing; anywhere else it prints exactly what to install and exits 2.
# Usage: scripts/ensure-deps.sh [--server]   (--server: initdb/pg_ctl are needed too)
set -euo pipefail
need_server=${1:-}
pg_major=${PG_MAJOR:-15}
packages=(postgresql-$pg_major postgresql-$pg_major-pgtap libtap-parser-sourcehandler-pgtap-perl python3-psycopg2 pgbouncer chromium)

bindir() {
  local d
  for d in ${PG_BINDIR:-} /usr/lib/postgresql/$pg_major/bin /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}

missing() {
  local d
  command -v psql >/dev/null || { echo "psql"; return; }
  command -v pg_prove >/dev/null || { echo "pg_prove"; return; }
  d=$(bindir) || { [ "$need_server" = --server ] && { echo "initdb"; return; }; }
  if [ -n "${d:-}" ] && ! ls "$d"/../../../../share/postgresql/*/extension/pgtap.control >/dev/null 2>&1 \
     && ! ls /usr/share/postgresql/*/extension/pgtap.control >/dev/null 2>&1; then
    echo "pgtap"; return
  fi
  has_psycopg2 || { echo "python3-psycopg2"; return; }
  # Debian installs it in /usr/sbin, which a normal user's PATH may lack.
  command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || { echo "pgbouncer"; return; }
  command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { echo "chromium"; return; }
}

# Debian's python3-psycopg2 belongs to /usr/bin/python3, which may differ from python3 on PATH.
has_psycopg2() {
  local py
  for py in /usr/bin/python3 "$(command -v python3 || true)"; do
    [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import psycopg2' >/dev/null 2>&1 && return 0
  done
  return 1
}

what=$(missing || true)
[ -z "$what" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "ensure-deps: $what is missing; installing ${packages[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # Installing pgbouncer enables its system service; where systemd runs, it starts on port 6432
  # with Debian's configuration. The tests do not use it (they start their own), so stop it.
  had_pgbouncer=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true)
  apt-get install -y -qq --no-install-recommends "${packages[@]}" >&2
  if [ -z "$had_pgbouncer" ] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl disable --now pgbouncer >/dev/null 2>&1 || true
  fi
  what=$(missing || true)
  [ -z "$what" ] && exit 0
  echo "ensure-deps: $what is still missing after apt-get install" >&2
  exit 2
fi
cat >&2 <<MSG
ensure-deps: $what is missing. Install, then run again:
  Debian/Ubuntu:  sudo apt-get update && sudo apt-get install ${packages[*]}
  macOS (brew):   brew install postgresql@$pg_major pgtap pgbouncer   (pg_prove: cpan TAP::Parser::SourceHandler::pgTAP;
                  psycopg2: python3 -m pip install psycopg2-binary; brew install --cask chromium)
Or point DATABASE_URL at a PostgreSQL $pg_major+ server with the pgtap extension available.
MSG
exit 2
