# pgdrain — make help lists the targets.
SHELL := /bin/bash
GO ?= go
WITH_PG := scripts/with-postgres.sh

.PHONY: help test test-sql test-go demo bench soak lint verify migration sums

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

test: ## everything: throwaway cluster (unless DATABASE_URL), migrations, pg_prove, go test
	@$(WITH_PG) -- scripts/test.sh

test-sql: ## only the pgTAP suite
	@$(WITH_PG) -- scripts/test.sh sql

test-go: ## only go test
	@$(WITH_PG) -- scripts/test.sh go

demo: ## the main job: 20k events, 3 drainers, a flaky webhook peer, a report
	@$(WITH_PG) -- $(GO) run ./cmd/pgdrain-demo

bench: ## benchmark tables (fsync on) into bench/out/; flags: make bench BENCH_ARGS="-sections pipeline"
	@$(WITH_PG) --fsync -- scripts/bench.sh $(BENCH_ARGS)

soak: ## the chaos drain, the relay chaos run and the model-based test for 10 minutes each
	@$(WITH_PG) -- env PGDRAIN_SOAK=10m $(GO) test ./gocheck -run 'TestChaos|TestRelayChaos|TestModel' -count=1 -v -timeout 80m

lint: ## go vet and gofmt
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

verify: ## drift checks only: SUMS, migrations == sql/functions, baseline == history, migration round trip
	@$(WITH_PG) -- bash -c 'go run ./cmd/goose-run up >/dev/null && $(GO) test -count=1 ./migrations && $(GO) test -count=1 -run "Test_MigratedDatabase_EqualsSqlFunctions|TestBaseline_EqualsTheHistory|Test_Migrations_RoundTrip" ./gocheck'

sums: ## rewrite migrations/SUMS after adding a migration
	@cd migrations && find . -name '*.sql' | sort | xargs sha256sum > SUMS

migration: ## new migration from sql/functions: make migration MODULE=outbox NAME=what_changed FUNCS="claim_batch apply_result"
	@scripts/new-migration.sh "$(MODULE)" "$(NAME)" $(FUNCS)
