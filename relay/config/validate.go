package config

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/pgdrain/pgdrain/drainer"
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
func (f *File) validate(p *parser) {
	switch f.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		p.at([]string{"log", "level"}, "must be debug, info, warn or error, got %q", f.Log.Level)
	}
	switch f.Log.Format {
	case "", "json", "text":
	default:
		p.at([]string{"log", "format"}, "must be json or text, got %q", f.Log.Format)
	}
	if len(f.Queues) == 0 {
		p.at([]string{"queues"}, "must list at least one queue and its sink")
	}
	seen := map[string]int{}
	for i, q := range f.Queues {
		path := []string{"queues", strconv.Itoa(i)}
		q.validate(p, path)
		key := canonical(q.Queue)
		if j, dup := seen[key]; dup && q.Queue != "" {
			p.at(append(path, "queue"), "is already relayed by queues[%d]: one entry per queue", j)
		}
		seen[key] = i
	}
}

func (q Queue) validate(p *parser, path []string) {
	sub := func(keys ...string) []string { return append(append([]string(nil), path...), keys...) }
	mode, err := q.claimMode()
	if err != nil {
		p.at(sub("claim_mode"), "%v", err)
	}
	// relay.Route.Validate checks the drainer's fields and the batch; a placeholder sink stands in
	// for the one built later, whose settings are checked below.
	route := q.route(mode, placeholder{}, "placeholder")
	for _, line := range splitLines(route.Validate()) {
		field, msg, _ := strings.Cut(line, " ")
		key, ok := routeFields[field]
		if !ok {
			p.at(path, "%s", inMessage.Replace(line))
			continue
		}
		p.at(sub(key), "%s", inMessage.Replace(msg))
	}

	kinds := q.Sink.kinds()
	switch len(kinds) {
	case 0:
		p.at(sub("sink"), "must name one sink: %s", strings.Join(sinkKinds, ", "))
	case 1:
	default:
		p.at(sub("sink"), "must name one sink, got %s", strings.Join(kinds, " and "))
	}
	if c := q.Sink.Webhook; c != nil {
		sinkErrors(p, sub("sink", "webhook"), reflect.TypeFor[webhook.Config](), c.Validate())
	}
	if c := q.Sink.Kafka; c != nil {
		sinkErrors(p, sub("sink", "kafka"), reflect.TypeFor[kafka.Config](), c.Validate())
	}
	if c := q.Sink.JetStream; c != nil {
		sinkErrors(p, sub("sink", "jetstream"), reflect.TypeFor[jetstream.Config](), c.Validate())
	}
}

// sinkErrors places each line of a sink's Validate error (each starting with a Go field name,
// possibly indexed: "Secrets[1] must ...") at the line of that field, with the Go field names it
// mentions in the file's words.
func sinkErrors(p *parser, path []string, t reflect.Type, err error) {
	for _, line := range splitLines(err) {
		field, msg, _ := strings.Cut(line, " ")
		name, index, _ := strings.Cut(field, "[")
		key := yamlKey(t, name)
		if key == "" {
			p.at(path, "%s", inFileWords(t, line))
			continue
		}
		at := append(append([]string(nil), path...), key)
		if index != "" {
			at = append(at, strings.TrimSuffix(index, "]"))
		}
		p.at(at, "%s", inFileWords(t, msg))
	}
}

// inFileWords replaces the Go field names of struct t that msg mentions ("TopicField") with their
// yaml keys ("topic_field"); a name is replaced only as a whole word, so Topic is not read inside
// TopicField, and only when its key is not the name in lower case (URL, Topic read the same).
func inFileWords(t reflect.Type, msg string) string {
	for f := range t.Fields() {
		key := yamlKey(t, f.Name)
		if key == "" || key == strings.ToLower(f.Name) || !f.IsExported() || !strings.Contains(msg, f.Name) {
			continue
		}
		msg = regexp.MustCompile(`\b`+regexp.QuoteMeta(f.Name)+`\b`).ReplaceAllLiteralString(msg, key)
	}
	return msg
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

func splitLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}
