package config

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/yamlfile"
	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/jetstream"
	"github.com/pgdrain/pgdrain/relay/kafka"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

// routeFields maps relay.Route's field names (as its Validate names them) to the file's keys.
var routeFields = map[string]string{
	"Queue":                          "queue",
	"Drainer.Table":                  "queue",
	"BatchSize":                      "batch_size",
	"BatchLinger":                    "batch_linger",
	"Drainer.ApplyConcurrency":       "concurrency",
	"Drainer.ApplyTimeout":           "timeout",
	"Drainer.Lease":                  "lease",
	"Drainer.LockTransactionTimeout": "lock_transaction_timeout",
	"Drainer.PollFallback":           "poll_fallback",
	"Drainer.RepairInterval":         "repair_interval",
	"Drainer.ClaimMode":              "claim_mode",
	"FailureLogInterval":             "failure_log_interval",
	"WedgeWarnAfter":                 "wedge_warn_after",
}

// inMessage renames the Go fields a message mentions to the file's keys (longest names first,
// so LockTransactionTimeout is not read as ...Timeout).
var inMessage = strings.NewReplacer(
	"Drainer.ApplyConcurrency", "concurrency", "Drainer.LockTransactionTimeout", "lock_transaction_timeout",
	"LockTransactionTimeout", "lock_transaction_timeout", "ApplyConcurrency", "concurrency",
	"ApplyTimeout", "timeout", "BatchSize", "batch_size", "LeaseMargin", "LeaseMargin", "Lease", "lease",
)

// validate reports every problem of f; the file has been decoded, so every field has a line.
func (f *File) validate(p *yamlfile.Problems) {
	f.Log.Check(p, "log")
	if len(f.Queues) == 0 {
		p.At([]string{"queues"}, "must list at least one queue and its sink")
	}
	seen := map[string]int{}
	for i, q := range f.Queues {
		path := []string{"queues", strconv.Itoa(i)}
		q.validate(p, path)
		key := canonical(q.Queue)
		if j, dup := seen[key]; dup && q.Queue != "" {
			p.At(append(path, "queue"), "is already relayed by queues[%d]: one entry per queue", j)
		}
		seen[key] = i
	}
}

func (q Queue) validate(p *yamlfile.Problems, path []string) {
	sub := func(keys ...string) []string { return append(append([]string(nil), path...), keys...) }
	mode, err := q.claimMode()
	if err != nil {
		p.At(sub("claim_mode"), "%v", err)
	}
	// relay.Route.Validate checks the drainer's fields and the batch; a placeholder sink stands in
	// for the one built later, whose settings are checked below.
	route := q.route(mode, placeholder{}, "placeholder")
	for _, line := range yamlfile.SplitLines(route.Validate()) {
		field, msg, _ := strings.Cut(line, " ")
		key, ok := routeFields[field]
		if !ok {
			p.At(path, "%s", inMessage.Replace(line))
			continue
		}
		p.At(sub(key), "%s", inMessage.Replace(msg))
	}

	kinds := q.Sink.kinds()
	switch len(kinds) {
	case 0:
		p.At(sub("sink"), "must name one sink: %s", strings.Join(sinkKinds, ", "))
	case 1:
	default:
		p.At(sub("sink"), "must name one sink, got %s", strings.Join(kinds, " and "))
	}
	// Each line of a sink's Validate error starts with a Go field name, possibly indexed
	// ("Secrets[1] must ..."): it is placed at the line of that field, in the file's words.
	if c := q.Sink.Webhook; c != nil {
		p.FieldErrors(sub("sink", "webhook"), reflect.TypeFor[webhook.Config](), c.Validate())
	}
	if c := q.Sink.Kafka; c != nil {
		p.FieldErrors(sub("sink", "kafka"), reflect.TypeFor[kafka.Config](), c.Validate())
	}
	if c := q.Sink.JetStream; c != nil {
		p.FieldErrors(sub("sink", "jetstream"), reflect.TypeFor[jetstream.Config](), c.Validate())
	}
}

// sinkKinds are the sinks a file can name.
var sinkKinds = []string{"webhook", "kafka", "jetstream"}

// kinds lists the sinks s names.
func (s Sink) kinds() []string {
	var out []string
	if s.Webhook != nil {
		out = append(out, "webhook")
	}
	if s.Kafka != nil {
		out = append(out, "kafka")
	}
	if s.JetStream != nil {
		out = append(out, "jetstream")
	}
	return out
}

func (q Queue) claimMode() (drainer.ClaimMode, error) {
	switch q.ClaimMode {
	case "", "lease":
		return drainer.ClaimLease, nil
	case "lock":
		return drainer.ClaimLock, nil
	}
	return drainer.ClaimLease, fmt.Errorf("must be lease or lock, got %q", q.ClaimMode)
}

// route is the relay.Route of q with sink.
func (q Queue) route(mode drainer.ClaimMode, sink relay.Sink, kind string) relay.Route {
	return relay.Route{
		Queue:              q.Queue,
		Sink:               sink,
		SinkKind:           kind,
		BatchSize:          q.BatchSize,
		BatchLinger:        q.BatchLinger,
		FailureLogInterval: q.FailureLogInterval,
		WedgeWarnAfter:     q.WedgeWarnAfter,
		Drainer: drainer.Config{
			ClaimMode:              mode,
			ApplyConcurrency:       q.Concurrency,
			ApplyTimeout:           q.Timeout,
			Lease:                  q.Lease,
			LockTransactionTimeout: q.LockTransactionTimeout,
			PollFallback:           q.PollFallback,
			RepairInterval:         q.RepairInterval,
		},
	}
}

// placeholder lets relay.Route.Validate run before the real sink exists.
type placeholder struct{}

func (placeholder) Deliver(_ context.Context, events []relay.Event) []relay.Result { return nil }
func (placeholder) Close() error                                                   { return nil }

func canonical(q string) string {
	q = strings.ToLower(q)
	if !strings.Contains(q, ".") {
		q = "public." + q
	}
	return q
}
