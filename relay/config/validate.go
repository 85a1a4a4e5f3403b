package config

import (
	"cmp"
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
	"Drainer.RunLength":              "run_length",
	"Drainer.TrickleInterval":        "trickle_interval",
	"Drainer.AsyncResults":           "async_results",
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
	"ClaimLock", "claim_mode lock",
)

// validate reports every problem of f; the file has been decoded, so every field has a line.
func (f *File) validate(p *yamlfile.Problems) {
	f.Log.Check(p, "log")
	yamlfile.CheckListen(p, f.Listen, "listen")
	if len(f.Queues) == 0 {
		p.At([]string{"queues"}, "must list at least one queue and its sink")
	}
	// Each queue is drained by one entry: relayed to its sink, or fanned out (and each sink's
	// queue relayed to its sink).
	type owner struct {
		where     string
		fannedOut bool
	}
	seen := map[string]owner{}
	claim := func(queue string, at []string, o owner) {
		key := canonical(queue)
		if prev, dup := seen[key]; dup {
			verb := "relayed"
			if prev.fannedOut {
				verb = "fanned out"
			}
			p.At(at, "is already %s by %s: one entry per queue", verb, prev.where)
			return
		}
		seen[key] = o
	}
	for i, q := range f.Queues {
		path := []string{"queues", strconv.Itoa(i)}
		q.validate(p, path)
		if q.Queue == "" {
			continue
		}
		where := fmt.Sprintf("queues[%d]", i)
		claim(q.Queue, append(path, "queue"), owner{where: where, fannedOut: len(q.Sinks) > 0})
		named := map[string]bool{}
		for j, s := range q.Sinks {
			if s.Name != "" && !named[s.Name] && relay.CheckFanOutSink(q.Queue, s.Name) == "" { // a name twice is reported by q.validate
				named[s.Name] = true
				claim(relay.FanOutQueue(q.Queue, s.Name), append(append([]string(nil), path...), "sinks", strconv.Itoa(j), "name"),
					owner{where: fmt.Sprintf("%s.sinks[%d]", where, j)})
			}
		}
	}
}

// fanOutFields maps relay.FanOut's field names (as its Validate names them) to the file's keys.
var fanOutFields = map[string][]string{
	"Queue":          {"queue"},
	"BatchSize":      {"fanout", "batch_size"},
	"Timeout":        {"fanout", "timeout"},
	"PollFallback":   {"fanout", "poll_fallback"},
	"RepairInterval": {"fanout", "repair_interval"},
}

func (q Queue) validate(p *yamlfile.Problems, path []string) {
	sub := func(keys ...string) []string { return append(append([]string(nil), path...), keys...) }
	if len(q.Sinks) == 0 {
		if q.FanOut != (FanOut{}) {
			p.At(sub("fanout"), "is only for a queue fanned out to sinks (sinks)")
		}
		q.Delivery.validate(p, path, q.Queue, "queue")
		return
	}
	q.validateFannedOut(p, sub)
}

// validateFannedOut reports the problems of a queue fanned out to sinks: the delivery fields are
// each sink's, the fan-out's own settings, and each sink's name and delivery.
func (q Queue) validateFannedOut(p *yamlfile.Problems, sub func(keys ...string) []string) {
	d := reflect.ValueOf(q.Delivery)
	for i := range d.NumField() {
		if d.Field(i).IsZero() {
			continue
		}
		key := yamlfile.Key(reflect.TypeFor[Delivery](), d.Type().Field(i).Name)
		if key == "sink" {
			p.At(sub(key), "and sinks exclude each other: one sink, or a list of named sinks each with its own queue")
			continue
		}
		p.At(sub(key), "is set per sink when the queue is fanned out: move it under each of sinks")
	}
	fo := q.fanOut()
	for _, line := range yamlfile.SplitLines(fo.Validate()) {
		field, msg, _ := strings.Cut(line, " ")
		if keys, ok := fanOutFields[field]; ok {
			p.At(sub(keys...), "%s", inMessage.Replace(msg))
			continue
		}
		p.At(sub("fanout"), "%s", inMessage.Replace(line))
	}
	names := map[string]int{}
	for j, s := range q.Sinks {
		spath := sub("sinks", strconv.Itoa(j))
		name := append(append([]string(nil), spath...), "name")
		switch {
		case s.Name == "":
			p.At(name, "must be set: the sink delivers the events of the queue %s",
				relay.FanOutQueue(cmp.Or(q.Queue, "QUEUE"), "<name>"))
		default:
			if problem := relay.CheckFanOutSink(cmp.Or(q.Queue, "q"), s.Name); problem != "" {
				p.At(name, "%s", problem)
			} else if k, dup := names[s.Name]; dup {
				p.At(name, "is already the name of sinks[%d]", k)
			}
			names[s.Name] = j
		}
		s.Delivery.validate(p, spath, relay.FanOutQueue(cmp.Or(q.Queue, "q"), cmp.Or(s.Name, "sink")), "name")
	}
}

// fanOut is the relay.FanOut of q.
func (q Queue) fanOut() relay.FanOut {
	return relay.FanOut{Queue: q.Queue, BatchSize: q.FanOut.BatchSize, Timeout: q.FanOut.Timeout,
		PollFallback: q.FanOut.PollFallback, RepairInterval: q.FanOut.RepairInterval}
}

// validate reports d's problems, d being the delivery of queue at path (queueKey: the key its
// Queue problems are reported at).
func (d Delivery) validate(p *yamlfile.Problems, path []string, queue, queueKey string) {
	sub := func(keys ...string) []string { return append(append([]string(nil), path...), keys...) }
	mode, err := d.claimMode()
	if err != nil {
		p.At(sub("claim_mode"), "%v", err)
	}
	// relay.Route.Validate checks the drainer's fields and the batch; a placeholder sink stands in
	// for the one built later, whose settings are checked below.
	route := d.route(queue, mode, placeholder{}, "placeholder")
	for _, line := range yamlfile.SplitLines(route.Validate()) {
		field, msg, _ := strings.Cut(line, " ")
		key, ok := routeFields[field]
		if key == "queue" {
			key = queueKey
		}
		if !ok {
			p.At(path, "%s", inMessage.Replace(line))
			continue
		}
		p.At(sub(key), "%s", inMessage.Replace(msg))
	}

	kinds := d.Sink.kinds()
	switch len(kinds) {
	case 0:
		p.At(sub("sink"), "must name one sink: %s", strings.Join(sinkKinds, ", "))
	case 1:
	default:
		p.At(sub("sink"), "must name one sink, got %s", strings.Join(kinds, " and "))
	}
	if c := d.Sink.Webhook; c != nil {
		p.FieldErrors(sub("sink", "webhook"), reflect.TypeFor[webhook.Config](), c.Validate())
	}
	if c := d.Sink.Kafka; c != nil {
		p.FieldErrors(sub("sink", "kafka"), reflect.TypeFor[kafka.Config](), c.Validate())
	}
	if c := d.Sink.JetStream; c != nil {
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

func (d Delivery) claimMode() (drainer.ClaimMode, error) {
	switch d.ClaimMode {
	case "", "lease":
		return drainer.ClaimLease, nil
	case "lock":
		return drainer.ClaimLock, nil
	}
	return drainer.ClaimLease, fmt.Errorf("must be lease or lock, got %q", d.ClaimMode)
}

// route is the relay.Route of queue with d and sink.
func (d Delivery) route(queue string, mode drainer.ClaimMode, sink relay.Sink, kind string) relay.Route {
	q := d
	return relay.Route{
		Queue:              queue,
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
			RunLength:              q.RunLength,
			TrickleInterval:        q.TrickleInterval,
			AsyncResults:           q.AsyncResults,
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
