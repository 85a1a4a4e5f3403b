package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"

	"github.com/pgdrain/pgdrain/internal/yamlfile"
	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/jetstream"
	"github.com/pgdrain/pgdrain/relay/kafka"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

// Routes builds each queue's sink (each sink of a queue fanned out) and returns the relay's routes:
// a queue fanned out has one route per sink, on the sink's queue (relay.FanOutQueue); FanOuts
// lists those queues. A sink that cannot be built (a broker that refuses the connection at start)
// is an error naming the queue; sinks already built are closed.
func (f *File) Routes(ctx context.Context) ([]relay.Route, error) {
	var routes []relay.Route
	add := func(where, queue string, d Delivery) error {
		sink, kind, t, err := d.Sink.build(ctx)
		if err != nil {
			for _, r := range routes {
				_ = r.Sink.Close()
			}
			return fmt.Errorf("%s (%s): building the %s sink: %s", where, queue, kind, yamlfile.InFileWords(t, err.Error()))
		}
		mode, _ := d.claimMode() // validated
		routes = append(routes, d.route(queue, mode, sink, kind))
		return nil
	}
	for i, q := range f.Queues {
		if len(q.Sinks) == 0 {
			if err := add(f.Where(i), q.Queue, q.Delivery); err != nil {
				return nil, err
			}
			continue
		}
		for j, s := range q.Sinks {
			if err := add(f.whereSink(i, j), relay.FanOutQueue(q.Queue, s.Name), s.Delivery); err != nil {
				return nil, err
			}
		}
	}
	return routes, nil
}

// FanOuts returns the fan-out of every queue that has sinks (relay.WithFanOut).
func (f *File) FanOuts() []relay.FanOut {
	var out []relay.FanOut
	for _, q := range f.Queues {
		if len(q.Sinks) > 0 {
			out = append(out, q.fanOut())
		}
	}
	return out
}

// build returns the sink, its kind and its config's type (whose Go field names its errors use).
func (s Sink) build(context.Context) (relay.Sink, string, reflect.Type, error) {
	switch {
	case s.Webhook != nil:
		sink, err := webhook.New(*s.Webhook)
		return sink, "webhook", reflect.TypeFor[webhook.Config](), err
	case s.Kafka != nil:
		sink, err := kafka.New(*s.Kafka)
		return sink, "kafka", reflect.TypeFor[kafka.Config](), err
	case s.JetStream != nil:
		sink, err := jetstream.New(*s.JetStream)
		return sink, "jetstream", reflect.TypeFor[jetstream.Config](), err
	}
	return nil, "", reflect.TypeFor[Sink](), errors.New("no sink") // validate makes this unreachable
}

// Logger returns the logger the file asks for, writing to w.
func (f *File) Logger(w io.Writer) *slog.Logger { return f.Log.Logger(w) }
