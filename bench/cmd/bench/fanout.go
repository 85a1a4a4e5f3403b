package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/relay"
)

// Section 9: fan-out (issue 31 item 2). One queue fed to one sink directly, or fanned out to one
// and to two sinks (relay.FanOut: the relay copies each event into one queue per sink in its claim
// transaction, each sink drains its own queue): how fast every sink gets every event, what it
// writes (WAL per event), and what producers pay meanwhile. The sinks are no-op sinks, so the
// figures are pgdrain's own cost.

const (
	fanOutPollFallback = time.Second
	hotEvents          = 1000 // events of the one-key runs
)

// fanOutCase is one row of the drain table.
type fanOutCase struct {
	name   string
	sinks  int
	fanOut bool
}

var fanOutCases = []fanOutCase{
	{"one sink, the queue relayed directly", 1, false},
	{"fan-out to 1 sink", 1, true},
	{"fan-out to 2 sinks", 2, true},
}

// fanOutRelay starts a relay of q as c says (the sinks' queues made first) and returns the tables
// every event must end up sent in, and stop.
func fanOutRelay(ctx context.Context, pool *pgxpool.Pool, q string, c fanOutCase, sinksRun bool) ([]string, func() error, error) {
	if !c.fanOut {
		stop, err := startRelay(ctx, pool, relayRoute(q, noopSink{}, "noop"))
		return []string{q}, stop, err
	}
	tables := []string{q}
	var routes []relay.Route
	for i := range c.sinks {
		name := fmt.Sprintf("s%d", i)
		if _, err := relay.AddFanOutSink(ctx, pool, q, name, relay.FromNow); err != nil {
			return nil, nil, err
		}
		tables = append(tables, relay.FanOutQueue(q, name))
		routes = append(routes, relayRoute(relay.FanOutQueue(q, name), noopSink{}, "noop")...)
	}
	if !sinksRun {
		routes, tables = nil, tables[:1]
	}
	r, err := relay.New(pool, routes, relay.WithFanOut(relay.FanOut{Queue: q, PollFallback: fanOutPollFallback}))
	if err != nil {
		return nil, nil, err
	}
	return tables, runUntilStopped(ctx, r.Run), nil
}

// allSent reports whether each of tables holds n rows, all sent.
func allSent(ctx context.Context, pool *pgxpool.Pool, tables []string, n int) (bool, error) {
	for _, t := range tables {
		var left bool
		if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL)", t)).Scan(&left); err != nil {
			return false, err
		}
		if left {
			return false, nil
		}
		var count int
		if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s", t)).Scan(&count); err != nil {
			return false, err
		}
		if count != n {
			return false, nil
		}
	}
	return true, nil
}

func walLSN(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var lsn int64
	err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").Scan(&lsn)
	return lsn, err
}

// fanOutDrainOnce fills q with n events (n/6 keys, or one key when hot), relays it as c says and
// returns the events per second until every table had every event sent, and the WAL written per
// event meanwhile.
func fanOutDrainOnce(ctx context.Context, pool *pgxpool.Pool, q string, c fanOutCase, n int, sinksRun, hot bool) (float64, float64, error) {
	if hot {
		if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.create_queue('%s', 'resource_id')", q),
			insertSQL(q, n, "'hot'"), "VACUUM ANALYZE "+q); err != nil {
			return 0, 0, err
		}
	} else if err := fillQueue(ctx, pool, q, n, true); err != nil {
		return 0, 0, err
	}
	lsn0, err := walLSN(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	tables, stop, err := fanOutRelay(ctx, pool, q, c, sinksRun)
	if err != nil {
		return 0, 0, err
	}
	deadline := start.Add(5 * time.Minute)
	for {
		done, err := allSent(ctx, pool, tables, n)
		if err != nil || done || time.Now().After(deadline) {
			elapsed := time.Since(start)
			lsn1, lerr := walLSN(ctx, pool)
			if err := errors.Join(err, stop(), lerr); err != nil {
				return 0, 0, err
			}
			if !done {
				return 0, 0, fmt.Errorf("%s: not every event sent after 5 minutes", c.name)
			}
			return float64(n) / elapsed.Seconds(), float64(lsn1-lsn0) / float64(n), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dropFanOut drops q and every sink queue of c.
func dropFanOut(ctx context.Context, pool *pgxpool.Pool, q string, c fanOutCase) error {
	sqls := []string{fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", q)}
	if c.fanOut {
		for i := range c.sinks {
			sqls = append(sqls, fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", relay.FanOutQueue(q, fmt.Sprintf("s%d", i))))
		}
	}
	return execAll(ctx, pool, sqls...)
}

// fanOutProduce runs producers single-row INSERT transactions into q for d and returns the
// transactions per second and their mean latency.
func fanOutProduce(ctx context.Context, pool *pgxpool.Pool, q string, producers int, d time.Duration) (float64, time.Duration, error) {
	insert := fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
		VALUES ('evt', jsonb_build_object('n', $1::int, 'pad', repeat('x', 80)), 'key-' || ($1::int %% 1000))`, q)
	var count, spent atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, producers)
	end := time.Now().Add(d)
	for p := range producers {
		wg.Go(func() {
			for i := p; time.Now().Before(end); i += producers {
				t := time.Now()
				if _, err := pool.Exec(ctx, insert, i); err != nil {
					errs[p] = err
					return
				}
				spent.Add(int64(time.Since(t)))
				count.Add(1)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	n := count.Load()
	return float64(n) / d.Seconds(), time.Duration(spent.Load() / max(n, 1)), nil
}

func benchFanOut(ctx context.Context, o options, emit func(string)) error {
	pool, err := freshDatabase(ctx, o.server, "bench_fanout", true, 40)
	if err != nil {
		return err
	}
	defer pool.Close()
	n := o.events
	emit(fmt.Sprintf("## 9. Fan-out: one queue, several sinks\n\n"+
		"Partitioned queue pre-filled with %d events; the relay starts, and the clock stops when every sink's queue "+
		"(or, relayed directly, the queue) has every event sent. Sinks are no-op sinks in lease mode, %d events in flight "+
		"in calls of %d; the fan-out copies up to %d events per transaction (relay.DefaultFanOutBatchSize). WAL: bytes "+
		"written per event, everything included. Median (min–max) of %d runs.\n\n",
		n, relayConcurrency, relayBatch, relay.DefaultFanOutBatchSize, o.runs))
	emit(fmt.Sprintf("| | events/s, %d keys | WAL bytes/event | events/s, one key | fan-out step alone (no sink running): events/s, %d keys | the same, one key |\n"+
		"|---|---:|---:|---:|---:|---:|\n", max(n/6, 1), max(n/6, 1)))
	run := 0
	for _, c := range fanOutCases {
		row := "| " + c.name + " |"
		type shape struct{ sinksRun, hot bool }
		for _, s := range []shape{{true, false}, {true, true}, {false, false}, {false, true}} {
			if !s.sinksRun && !c.fanOut {
				row += " — |"
				continue
			}
			var rates, wal []float64
			for range o.runs {
				run++
				q := fmt.Sprintf("public.fanout_%d", run)
				events := n
				if s.hot {
					events = min(n, hotEvents) // one key: each event waits for the one before
				}
				r, w, err := fanOutDrainOnce(ctx, pool, q, c, events, s.sinksRun, s.hot)
				if err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				rates, wal = append(rates, r), append(wal, w)
				if err := dropFanOut(ctx, pool, q, c); err != nil {
					return err
				}
			}
			row += " " + summarize(rates).format("%.0f") + " |"
			if s.sinksRun && !s.hot {
				row += " " + summarize(wal).format("%.0f") + " |"
			}
		}
		emit(row + "\n")
	}
	emit(fmt.Sprintf("\nThe one-key columns drain %d events of a single key.\n\n", min(n, hotEvents)))

	const producers = 4
	emit(fmt.Sprintf("Producers: %d sessions, each a loop of single-row INSERT transactions into the queue (1,000 keys) for %s, "+
		"while nothing drains it, while a relay relays it to one sink directly, and while the relay fans it out to two sinks "+
		"that both deliver. A producer writes the queue only, in every row: its statement and the queue's triggers are the "+
		"same; what differs is what else the server does meanwhile. Median (min–max) of %d runs.\n\n", producers, o.produce, o.runs))
	emit("| while | inserts/s | mean transaction latency |\n|---|---:|---:|\n")
	type phase struct {
		name string
		c    *fanOutCase
	}
	for _, p := range []phase{{"nothing drains", nil}, {fanOutCases[0].name, &fanOutCases[0]}, {fanOutCases[2].name, &fanOutCases[2]}} {
		var rates, lat []float64
		for range o.runs {
			run++
			q := fmt.Sprintf("public.fanout_%d", run)
			if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.create_queue('%s', 'resource_id')", q)); err != nil {
				return err
			}
			stop := func() error { return nil }
			c := fanOutCase{}
			if p.c != nil {
				c = *p.c
				_, s, err := fanOutRelay(ctx, pool, q, c, true)
				if err != nil {
					return err
				}
				stop = s
			}
			r, l, err := fanOutProduce(ctx, pool, q, producers, o.produce)
			if err := errors.Join(err, stop()); err != nil {
				return fmt.Errorf("producers while %s: %w", p.name, err)
			}
			rates, lat = append(rates, r), append(lat, float64(l.Microseconds())/1000)
			if err := dropFanOut(ctx, pool, q, c); err != nil {
				return err
			}
		}
		emit(fmt.Sprintf("| %s | %s | %s ms |\n", p.name, summarize(rates).format("%.0f"), summarize(lat).format("%.2f")))
	}
	emit("\n")
	return nil
}
