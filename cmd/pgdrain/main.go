// Command pgdrain is the operator's view of pgdrain queues: list them, read their gauges, find
// wedged partitions, requeue poisoned rows, purge sent history and check a queue's setup and its
// derived state; serve all of it as an operator console in the browser (pgdrain web); or deliver
// queues to webhooks, Kafka or NATS JetStream (pgdrain relay, docs/relay.md); or run the escalation
// engine with signed webhook notifiers (pgdrain escalate, docs/escalate.md).
//
//	pgdrain [--dsn URL] [--json] queues
//	pgdrain [--dsn URL] [--json] stats QUEUE
//	pgdrain [--dsn URL] [--json] wedged QUEUE [--older-than 1m] [--limit 10]
//	pgdrain [--dsn URL] [--json] requeue QUEUE (ID... | --all)
//	pgdrain [--dsn URL] [--json] purge QUEUE [--older-than 7d] [--max-rows N] [--chunk 5000] [--dry-run]
//	pgdrain [--dsn URL] [--json] check QUEUE
//	pgdrain [--dsn URL] [--json] web [--listen 127.0.0.1:8080] [--read-only] [--operator-dsn URL] ...
//	pgdrain [--dsn URL] relay --config FILE [--check]
//	pgdrain [--dsn URL] escalate --config FILE [--check]
//
// Exit codes: 0 ok, 1 problems found (check found a problem, wedged found a wedged partition),
// 2 usage error (including an unknown queue and an invalid relay or escalate config), 3 database error. See
// docs/cli.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
