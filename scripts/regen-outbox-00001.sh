#!/usr/bin/env bash
# Session-local helper while migration 00001 has not been released: rebuild it from sql/functions.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -f migrations/outbox/00001_outbox_core.sql
scripts/new-migration.sh outbox outbox_core all >/dev/null
