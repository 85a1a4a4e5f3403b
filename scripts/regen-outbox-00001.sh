#!/usr/bin/env bash
# Session-local helper while migration 00001 has not been released: rebuild it from sql/functions.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mv migrations/outbox/0000[2-9]_*.sql "$tmp"/ 2>/dev/null || true
rm -f migrations/outbox/00001_outbox_core.sql
scripts/new-migration.sh outbox outbox_core all >/dev/null
mv "$tmp"/*.sql migrations/outbox/ 2>/dev/null || true
