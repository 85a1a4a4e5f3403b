package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
)

// demo runs the whole scenario and gathers the report. An error means the demo could not run at
// all; a failed check is reported in the report.
func demo(ctx context.Context, s settings, server string, out *os.File, logger *slog.Logger) (*report, error) {
	r := &report{settings: s}
	dsn, err := freshDatabase(ctx, server)
	if err != nil {
		return nil, err
	}
	r.dsn = dsn
	step(out, "database %s", redact(dsn))
	if r.migrations, err = migrate(ctx, dsn); err != nil {
		return nil, err
	}
	step(out, "migrations applied: %s", strings.Join(r.migrations, ", "))
	pool, err := newPool(ctx, dsn, int32(s.producers+4))
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	defer pool.Close()
	if err := createSchema(ctx, pool, s.keys); err != nil {
		return nil, err
	}
	step(out, "queue %s partitioned by %s (backoff 50ms..1s, max_attempts 10)", queueName, partitionColumn)

	peer, err := startPeer(s.failRate)
	if err != nil {
		return nil, err
	}
	defer peer.close()
	hook := newWebhook(peer.url)
	step(out, "webhook peer %s: fails %.0f%% of calls with 503, rejects a malformed event with 422", peer.url, 100*s.failRate)

	drainCtx, stopDrain := context.WithCancel(ctx)
	defer stopDrain()
	replicas, waitReplicas, err := startReplicas(drainCtx, dsn, hook, s.replicas, logger)
	if err != nil {
		return nil, err
	}
	step(out, "%d drainer replicas running (lease mode, 32 applies in flight each); writing %d events over %d accounts",
		s.replicas, s.events, s.keys)

	prod := &producers{pool: pool, count: s.producers, keys: s.keys, events: s.events, malformedAt: int64(s.events / s.producers / 3)}
	produced := make(chan error, 1)
	start := time.Now()
	go func() { produced <- prod.run(ctx) }()

	fenced := make(chan fenceResult, 1)
	fenceStarted := false
	producing := true
	prog := newProgress(out, s.events)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var stats queueStats
	for {
		select {
		case <-ctx.Done():
			prog.done()
			stopDrain()
			_ = waitReplicas()
			return nil, fmt.Errorf("gave up after %s: %d of %d events sent", s.timeout, peer.snapshot().accepted, s.events)
		case err := <-produced:
			if err != nil {
				prog.done()
				return nil, fmt.Errorf("producing: %w", err)
			}
			producing = false
			r.produceTime = time.Since(start)
			r.transactions = prod.transactions.Load()
			continue
		case f := <-fenced:
			r.fence = &f
			continue
		case <-tick.C:
		}
		stats, err = readStats(ctx, pool)
		if err != nil {
			continue
		}
		snap := peer.snapshot()
		prog.update(snap.accepted, stats, prod.inserted.Load())
		if !fenceStarted && snap.accepted >= s.events/10 {
			// Mid-drain, while every replica is busy: the stalled drainer takes one row.
			fenceStarted = true
			go func() { fenced <- runStalled(ctx, dsn, hook, logger) }()
		}
		if !producing && fenceStarted && r.fence != nil && stats.pending == 0 {
			break
		}
	}
	r.drainTime = time.Since(start)
	prog.done()
	stopDrain()
	if err := waitReplicas(); err != nil {
		return nil, err
	}
	if err := r.collect(ctx, pool, peer, replicas); err != nil {
		return nil, err
	}

	step(out, "escalation ladder: paging for the poisoned event (2 engines, record then deliver)")
	alert := "demo.events: an event was poisoned"
	if len(r.poisoned) > 0 {
		alert = fmt.Sprintf("demo.events: event #%d poisoned (%s)", r.poisoned[0].id, r.poisoned[0].lastError)
	}
	lr := runLadder(ctx, pool, alert, logger)
	r.ladder = &lr

	// The operator's view of the same database, through the pgdrain CLI.
	for _, args := range [][]string{{"stats", queueName}, {"check", queueName}} {
		var buf, errBuf bytes.Buffer
		code := cli.Run(ctx, append([]string{"--dsn", dsn}, args...), &buf, &errBuf)
		r.cli = append(r.cli, cliRun{args: args, code: code, out: buf.String() + errBuf.String()})
	}
	return r, nil
}
