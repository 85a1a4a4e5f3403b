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

// fanOutPhase is what one measurement runs.
type fanOutPhase int

const (
	endToEnd   fanOutPhase = iota // the fan-out and the sinks together, from an empty sink queue
	stepAlone                     // the fan-out only
	sinksAfter                    // the sinks only, once the fan-out (untimed) filled their queues
)

// fanOutSinks makes the sinks' queues of q (none when c relays directly) and returns them.
func fanOutSinks(ctx context.Context, pool *pgxpool.Pool, q string, c fanOutCase) ([]string, error) {
	if !c.fanOut {
		return nil, nil
	}
	var out []string
	for i := range c.sinks {
		name := fmt.Sprintf("s%d", i)
		if _, err := relay.AddFanOutSink(ctx, pool, q, name, relay.FromNow); err != nil {
			return nil, err
		}
		out = append(out, relay.FanOutQueue(q, name))
	}
	return out, nil
}

// fanOutRelay starts a relay of q as c says: the fan-out when fanOut, the sinks (of sinkQueues, or
// q itself when c relays directly) when sinks.
func fanOutRelay(ctx context.Context, pool *pgxpool.Pool, q string, c fanOutCase, sinkQueues []string, fanOut, sinks bool) (func() error, error) {
	if !c.fanOut {
		return startRelay(ctx, pool, relayRoute(q, noopSink{}, "noop"))
	}
	var routes []relay.Route
	if sinks {
		for _, sq := range sinkQueues {
			routes = append(routes, relayRoute(sq, noopSink{}, "noop")...)
		}
	}
	var opts []relay.Option
	if fanOut {
		opts = append(opts, relay.WithFanOut(relay.FanOut{Queue: q, PollFallback: fanOutPollFallback}))
	}
	r, err := relay.New(pool, routes, opts...)
	if err != nil {
		return nil, err
	}
	return runUntilStopped(ctx, r.Run), nil
}

// waitAllSent waits (up to 5 minutes) until each of tables holds n rows, all sent.
func waitAllSent(ctx context.Context, pool *pgxpool.Pool, tables []string, n int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		done, err := allSent(ctx, pool, tables, n)
		switch {
		case err != nil:
			return err
		case done:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("not every event of %v sent after 5 minutes", tables)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// fanOutDrainOnce fills q with n events (n/6 keys, or one key when hot), runs phase of c and
// returns the events per second until every table it fills had every event sent, and the WAL
// written per event meanwhile.
func fanOutDrainOnce(ctx context.Context, pool *pgxpool.Pool, q string, c fanOutCase, n int, phase fanOutPhase, hot bool) (float64, float64, error) {
	if hot {
		if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.create_queue('%s', 'resource_id')", q),
			insertSQL(q, n, "'hot'"), "VACUUM ANALYZE "+q, settleFill); err != nil {
			return 0, 0, err
		}
	} else if err := fillQueue(ctx, pool, q, n, true, 0); err != nil {
		return 0, 0, err
	}
	sinkQueues, err := fanOutSinks(ctx, pool, q, c)
	if err != nil {
		return 0, 0, err
	}
	tables := append([]string{q}, sinkQueues...)
	if phase == sinksAfter {
		stop, err := fanOutRelay(ctx, pool, q, c, sinkQueues, true, false)
		if err != nil {
			return 0, 0, err
		}
		if err := errors.Join(waitAllSent(ctx, pool, tables[:1], n), stop()); err != nil {
			return 0, 0, err
		}
		tables = sinkQueues
	}
	if phase == stepAlone {
		tables = tables[:1]
	}
	lsn0, err := walLSN(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	stop, err := fanOutRelay(ctx, pool, q, c, sinkQueues, phase != sinksAfter, phase != stepAlone)
	if err != nil {
		return 0, 0, err
	}
	werr := waitAllSent(ctx, pool, tables, n)
	elapsed := time.Since(start)
	lsn1, lerr := walLSN(ctx, pool)
	if err := errors.Join(werr, stop(), lerr); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", c.name, err)
	}
	return float64(n) / elapsed.Seconds(), float64(lsn1-lsn0) / float64(n), nil
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
		"Partitioned queue pre-filled with %d events (VACUUM ANALYZE); the relay starts, and the clock stops when every "+
		"sink's queue (or, relayed directly, the queue) has every event sent. Sinks are no-op sinks in lease mode, %d events "+
		"in flight in calls of %d; the fan-out copies up to %d events per transaction (relay.DefaultFanOutBatchSize). "+
		"\"The fan-out alone\": no sink runs, the clock stops when the queue is fanned out. \"The sinks alone\": the fan-out "+
		"filled the sinks' queues first (untimed), then only the sinks run. In the first columns the sinks' queues start "+
		"empty while their drainers run, as in production; such a drainer claims slowly once its queue fills, until the "+
		"queue is analyzed (the same happens to any queue drained from the moment it is created). WAL: bytes written "+
		"per event, everything included. Median (min–max) of %d runs.\n\n",
		n, relayConcurrency, relayBatch, relay.DefaultFanOutBatchSize, o.runs))
	emit(fmt.Sprintf("| | every sink has every event: events/s, %d keys | WAL bytes/event | the same, one key | "+
		"the fan-out alone: events/s, %d keys | the same, one key | the sinks alone, their queues filled: events/s |\n"+
		"|---|---:|---:|---:|---:|---:|---:|\n", max(n/6, 1), max(n/6, 1)))
	run := 0
	type shape struct {
		phase fanOutPhase
		hot   bool
		wal   bool
	}
	for _, c := range fanOutCases {
		row := "| " + c.name + " |"
		for _, s := range []shape{{endToEnd, false, true}, {endToEnd, true, false}, {stepAlone, false, false}, {stepAlone, true, false}, {sinksAfter, false, false}} {
			if s.phase != endToEnd && !c.fanOut {
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
				r, w, err := fanOutDrainOnce(ctx, pool, q, c, events, s.phase, s.hot)
				if err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				rates, wal = append(rates, r), append(wal, w)
				if err := dropFanOut(ctx, pool, q, c); err != nil {
					return err
				}
			}
			row += " " + summarize(rates).format("%.0f") + " |"
			if s.wal {
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
				sinkQueues, err := fanOutSinks(ctx, pool, q, c)
				if err != nil {
					return err
				}
				if stop, err = fanOutRelay(ctx, pool, q, c, sinkQueues, true, true); err != nil {
					return err
				}
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
