package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/jetstream"
	"github.com/pgdrain/pgdrain/relay/kafka"
)

// Section 8: events/s through pgdrain relay (issue 15) to franz-go's in-process Kafka (kfake) and
// to an embedded NATS JetStream server, with 1 and 4 relay replicas, next to the Go drainer with
// a no-op applier and the relay with a no-op sink on the same queue shape: what the sink costs, and
// what the relay adds. Each replica has its own sink (its own Kafka client or NATS connection),
// as separate processes would.

const (
	relayConcurrency = 32 // events in flight per replica (ApplyConcurrency)
	relayBatch       = 32 // events per sink call (BatchSize)
	relayPartitions  = 12 // Kafka partitions of the topic
	relayWarm        = time.Second
)

// relayTarget starts one replica draining queue q; stop waits until it has stopped.
type relayTarget struct {
	name  string
	start func(ctx context.Context, pool *pgxpool.Pool, q string) (stop func() error, err error)
}

// relayRoute is the relay's configuration in every row of the table but the drainer's.
func relayRoute(q string, sink relay.Sink, kind string) []relay.Route {
	return []relay.Route{{Queue: q, Sink: sink, SinkKind: kind, BatchSize: relayBatch,
		Drainer: drainer.Config{ApplyConcurrency: relayConcurrency, ApplyTimeout: 5 * time.Second, PollFallback: time.Second}}}
}

func startRelay(ctx context.Context, pool *pgxpool.Pool, routes []relay.Route) (func() error, error) {
	r, err := relay.New(pool, routes)
	if err != nil {
		return nil, err
	}
	return runUntilStopped(ctx, r.Run), nil
}

// noopSink takes every event at once: the relay's own cost.
type noopSink struct{}

func (noopSink) Deliver(_ context.Context, events []relay.Event) []relay.Result {
	return make([]relay.Result, len(events)) // the zero Result is Sent
}

func (noopSink) Close() error { return nil }

// relayTargets returns the rows of the table; the Kafka and NATS servers live until cleanup.
func relayTargets() (targets []relayTarget, cleanup func(), err error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(relayPartitions, "relay"))
	if err != nil {
		return nil, nil, fmt.Errorf("starting kfake: %w", err)
	}
	ns, dir, err := startJetStream()
	if err != nil {
		cluster.Close()
		return nil, nil, err
	}
	cleanup = func() {
		cluster.Close()
		ns.Shutdown()
		_ = os.RemoveAll(dir)
	}
	targets = []relayTarget{
		{"Go drainer, no-op applier (package drainer)", func(ctx context.Context, pool *pgxpool.Pool, q string) (func() error, error) {
			cfg := relayRoute(q, nil, "")[0].Drainer
			cfg.Table = q
			d, err := drainer.New(pool, cfg, func(b []byte) (json.RawMessage, error) { return b, nil },
				func(context.Context, string, json.RawMessage) error { return nil })
			if err != nil {
				return nil, err
			}
			return runUntilStopped(ctx, d.Run), nil
		}},
		{"relay, no-op sink", func(ctx context.Context, pool *pgxpool.Pool, q string) (func() error, error) {
			return startRelay(ctx, pool, relayRoute(q, noopSink{}, "noop"))
		}},
		{"relay → Kafka (kfake, idempotent producer)", func(ctx context.Context, pool *pgxpool.Pool, q string) (func() error, error) {
			sink, err := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs(), Topic: "relay"})
			if err != nil {
				return nil, err
			}
			return startRelay(ctx, pool, relayRoute(q, sink, "kafka"))
		}},
		{"relay → NATS JetStream (embedded, file storage)", func(ctx context.Context, pool *pgxpool.Pool, q string) (func() error, error) {
			sink, err := jetstream.New(jetstream.Config{URL: ns.ClientURL(), Subject: "relay.events"})
			if err != nil {
				return nil, err
			}
			return startRelay(ctx, pool, relayRoute(q, sink, "jetstream"))
		}},
	}
	return targets, cleanup, nil
}

// startJetStream runs an embedded nats-server with JetStream and a stream RELAY on relay.>
// (file storage, the default 2-minute duplicate window that Nats-Msg-Id dedupes in).
func startJetStream() (*server.Server, string, error) {
	dir, err := os.MkdirTemp("", "pgdrain-bench-nats-")
	if err != nil {
		return nil, "", err
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, "", fmt.Errorf("starting nats-server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, "", errors.New("nats-server did not start within 10s")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return nil, "", err
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "RELAY", Subjects: []string{"relay.>"}}); err != nil {
		return nil, "", fmt.Errorf("creating the stream: %w", err)
	}
	return ns, dir, nil
}

// relayOnce fills partitioned queue q with n rows, drains it with replicas of t and returns the
// events sent per second over window, measured after relayWarm (start-up left out).
func relayOnce(ctx context.Context, pool *pgxpool.Pool, t relayTarget, replicas int, q string, n int, window time.Duration) (float64, error) {
	if err := fillQueue(ctx, pool, q, n, true, 0); err != nil {
		return 0, err
	}
	var stops []func() error
	stopAll := func() error {
		var errs []error
		for _, stop := range stops {
			errs = append(errs, stop())
		}
		return errors.Join(errs...)
	}
	for range replicas {
		stop, err := t.start(ctx, pool, q)
		if err != nil {
			return 0, errors.Join(err, stopAll())
		}
		stops = append(stops, stop)
	}
	sent := func() (int64, time.Time, error) {
		var c int64
		err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", q)).Scan(&c)
		return c, time.Now(), err
	}
	time.Sleep(relayWarm)
	s1, t1, err1 := sent()
	time.Sleep(window)
	s2, t2, err2 := sent()
	if err := errors.Join(stopAll(), err1, err2); err != nil {
		return 0, err
	}
	if s2 >= int64(n) {
		return 0, fmt.Errorf("%s drained all %d rows within %s: raise -relay-events", t.name, n, relayWarm+window)
	}
	return float64(s2-s1) / t2.Sub(t1).Seconds(), nil
}

func benchRelay(ctx context.Context, o options, emit func(string)) error {
	pool, err := freshDatabase(ctx, o.server, "bench_relay", true, 40)
	if err != nil {
		return err
	}
	defer pool.Close()
	targets, cleanup, err := relayTargets()
	if err != nil {
		return err
	}
	defer cleanup()
	emit(fmt.Sprintf("## 8. pgdrain relay: events/s to Kafka and NATS JetStream\n\n"+
		"Partitioned queue pre-filled with %d events (about 6 per key), lease mode; each replica runs %d events in "+
		"flight (ApplyConcurrency) in sink calls of up to %d (BatchSize) and has its own sink; one pool of 40 connections. "+
		"Kafka is franz-go's in-process cluster (kfake, 1 broker, a topic of %d partitions, record key = partition key), NATS an "+
		"embedded nats-server with a JetStream file-storage stream; both run in the bench process, on the same cores as "+
		"PostgreSQL and the relays. Events sent per second over %s after a %s warm-up, median (min–max) of %d runs.\n\n",
		o.relayEvents, relayConcurrency, relayBatch, relayPartitions, o.relayWindow, relayWarm, o.runs))
	emit("| delivered by | 1 replica | 4 replicas |\n|---|---:|---:|\n")
	run := 0
	for _, t := range targets {
		row := "| " + t.name + " |"
		for _, replicas := range []int{1, 4} {
			var rates []float64
			for range o.runs {
				run++
				q := fmt.Sprintf("public.relay_%d", run)
				r, err := relayOnce(ctx, pool, t, replicas, q, o.relayEvents, o.relayWindow)
				if err != nil {
					return fmt.Errorf("%s, %d replicas: %w", t.name, replicas, err)
				}
				rates = append(rates, r)
				if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", q)); err != nil {
					return err
				}
			}
			row += " " + summarize(rates).format("%.0f") + " |"
		}
		emit(row + "\n")
	}
	emit("\n")
	return nil
}
