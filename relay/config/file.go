package config

import (
	"fmt"
	"time"

	"github.com/pgdrain/pgdrain/internal/yamlfile"
	"github.com/pgdrain/pgdrain/relay/jetstream"
	"github.com/pgdrain/pgdrain/relay/kafka"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

// File is a relay config file.
type File struct {
	// DSN is the PostgreSQL URL, for a login role that is a member of pgdrain_worker. Defaults to
	// the command's --dsn, $DATABASE_URL or the PG* environment.
	DSN string `yaml:"dsn"`
	// Listen is the address of the HTTP endpoint serving /metrics and /healthz (":9464"). Empty
	// turns it off.
	Listen string `yaml:"listen"`
	// Log configures the relay's log, written to standard error.
	Log Log `yaml:"log"`
	// Queues maps each queue to its sink. At least one.
	Queues []Queue `yaml:"queues"`

	name       string  // the file's name, for errors
	queueLines []int   // the line of each queue's queue field
	sinkLines  [][]int // the line of each fan-out sink's name field, by queue
}

// Where says where queue i of the file is, as problems are reported: "relay.yaml:4:
// queues[0].queue".
func (f *File) Where(i int) string {
	line := 0
	if i >= 0 && i < len(f.queueLines) {
		line = f.queueLines[i]
	}
	return fmt.Sprintf("%s:%d: queues[%d].queue", f.name, line, i)
}

// Log configures the log: Level is debug, info (the default), warn or error; Format is json (the
// default) or text. The same section as in `pgdrain escalate`'s file.
type Log = yamlfile.Log

// whereSink says where sink j of queue i of the file is: "relay.yaml:9: queues[0].sinks[1].name".
func (f *File) whereSink(i, j int) string {
	line := 0
	if i >= 0 && i < len(f.sinkLines) && j >= 0 && j < len(f.sinkLines[i]) {
		line = f.sinkLines[i][j]
	}
	return fmt.Sprintf("%s:%d: queues[%d].sinks[%d].name", f.name, line, i, j)
}

// Queue relays one queue to one sink (sink), or fans it out to several (sinks), each delivering
// from its own queue at its own pace (relay.FanOut).
type Queue struct {
	// Queue is the queue table ("schema.table"), registered with outbox.create_queue. Required.
	Queue string `yaml:"queue"`
	// Delivery is how the queue's events go to its sink (with sink; unset with sinks, where each
	// sink has its own).
	Delivery `yaml:",inline"`
	// Sinks fans the queue out: each sink delivers the events of its own queue,
	// <queue>__<name> (relay.FanOutQueue, made by pgdrain fanout add), with its own settings.
	// Excludes Sink and the delivery fields beside it.
	Sinks []FanOutSink `yaml:"sinks"`
	// FanOut configures the copying of the queue's events into its sinks' queues (with sinks).
	FanOut FanOut `yaml:"fanout"`
}

// FanOutSink is one sink of a queue that is fanned out.
type FanOutSink struct {
	// Name names the sink and its queue, <queue>__<name>: lower case letters and digits with
	// single underscores between them. Required.
	Name string `yaml:"name"`
	// Delivery is how the sink's queue's events go to the sink.
	Delivery `yaml:",inline"`
}

// FanOut configures a queue's fan-out (relay.FanOut). A zero field takes the relay's default.
type FanOut struct {
	// BatchSize is how many events one fan-out transaction copies at most. Defaults to 500.
	BatchSize int `yaml:"batch_size"`
	// Timeout bounds each round of a fan-out transaction. Defaults to 10s.
	Timeout time.Duration `yaml:"timeout"`
	// PollFallback is how often the queue is claimed without a NOTIFY. Defaults to 30s.
	PollFallback time.Duration `yaml:"poll_fallback"`
	// RepairInterval is how often the repair pass runs on the queue (negative: off). Defaults to 1m.
	RepairInterval time.Duration `yaml:"repair_interval"`
}

// Delivery is how a queue's events go to its sink. A zero field takes the drainer's or the
// relay's default.
type Delivery struct {
	// ClaimMode is lease (the default: safe for slow peers) or lock (faster for fast peers).
	ClaimMode string `yaml:"claim_mode"`
	// Concurrency is how many events are in flight at once (drainer.Config.ApplyConcurrency).
	// Defaults to 1.
	Concurrency int `yaml:"concurrency"`
	// BatchSize is how many events one sink call gets at most (at most Concurrency). Defaults to 1.
	BatchSize int `yaml:"batch_size"`
	// BatchLinger is how long a batch that is not full waits for more events. Defaults to 5ms.
	BatchLinger time.Duration `yaml:"batch_linger"`
	// Timeout is each delivery's deadline (drainer.Config.ApplyTimeout). Defaults to 5s.
	Timeout time.Duration `yaml:"timeout"`
	// Lease is how long a claimed event is this relay's (lease mode). Defaults to 2*Timeout + 1s.
	Lease time.Duration `yaml:"lease"`
	// LockTransactionTimeout bounds a lock-mode batch's transaction. Defaults to the minimum that
	// gives every event its Timeout.
	LockTransactionTimeout time.Duration `yaml:"lock_transaction_timeout"`
	// PollFallback is how often the relay claims without a NOTIFY. Defaults to 30s.
	PollFallback time.Duration `yaml:"poll_fallback"`
	// RepairInterval is how often the repair pass runs (negative: off). Defaults to 1m.
	RepairInterval time.Duration `yaml:"repair_interval"`
	// RunLength is how many rows of one key a claim may take together (drainer.Config.RunLength:
	// a key's run is delivered in order, one event after another, and stops at its first
	// failure). Defaults to 1, the seed's claim.
	RunLength int `yaml:"run_length"`
	// TrickleInterval is the least time between claims while events trickle in
	// (drainer.Config.TrickleInterval; negative: off). Defaults to 20ms.
	TrickleInterval time.Duration `yaml:"trickle_interval"`
	// AsyncResults records results with synchronous_commit off (drainer.Config.AsyncResults, lease
	// mode only): the relay does not wait for their WAL flush, and the producers sharing the
	// server's disk do not queue behind it; a server crash may lose the last results, whose events
	// are delivered again when their lease ends. Defaults to false.
	AsyncResults bool `yaml:"async_results"`
	// FailureLogInterval is how often a key's transient failures are logged, at most
	// (relay.Route.FailureLogInterval; negative: off). Defaults to 1m.
	FailureLogInterval time.Duration `yaml:"failure_log_interval"`
	// WedgeWarnAfter logs a key failing for longer than this at Warn, once, with its last error
	// (relay.Route.WedgeWarnAfter; negative: off). Defaults to 5m.
	WedgeWarnAfter time.Duration `yaml:"wedge_warn_after"`
	// Sink names exactly one sink.
	Sink Sink `yaml:"sink"`
}

// Sink holds exactly one sink's settings.
type Sink struct {
	// Webhook POSTs each event, signed as Standard Webhooks describes (package relay/webhook).
	Webhook *webhook.Config `yaml:"webhook"`
	// Kafka produces each event as a record keyed by its partition key (package relay/kafka).
	Kafka *kafka.Config `yaml:"kafka"`
	// JetStream publishes each event to NATS JetStream with Nats-Msg-Id = its identity (package
	// relay/jetstream).
	JetStream *jetstream.Config `yaml:"jetstream"`
}
