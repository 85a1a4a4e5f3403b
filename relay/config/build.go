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

// Routes builds each queue's sink and returns the relay's routes. A sink that cannot be built
// (a broker that refuses the connection at start) is an error naming the queue; sinks already
// built are closed.
func (f *File) Routes(ctx context.Context) ([]relay.Route, error) {
	var routes []relay.Route
	for i, q := range f.Queues {
		sink, kind, t, err := q.Sink.build(ctx)
		if err != nil {
			for _, r := range routes {
				_ = r.Sink.Close()
			}
			return nil, fmt.Errorf("%s (%s): building the %s sink: %s", f.Where(i), q.Queue, kind, yamlfile.InFileWords(t, err.Error()))
		}
		mode, _ := q.claimMode() // validated
		routes = append(routes, q.route(mode, sink, kind))
	}
	return routes, nil
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
