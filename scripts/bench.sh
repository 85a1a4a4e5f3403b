#!/usr/bin/env bash
# make bench: runs the benchmark program (separate Go module bench/, so River stays out of the
# main go.mod) against $DATABASE_URL and writes bench/out/results.md and bench/out/claim_cost.png.
# Extra arguments go to the program, e.g. scripts/bench.sh -max-depth 100000 -runs 5.
set -euo pipefail
cd "$(dirname "$0")/../bench"
: "${DATABASE_URL:?DATABASE_URL must be set (make bench starts a throwaway cluster with fsync on)}"
go run ./cmd/bench -out out "$@"
