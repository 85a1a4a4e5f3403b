package drainer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// listenRetryMin and listenRetryMax bound the pause between LISTEN reconnection attempts.
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 5 * time.Second
)

// ListenerApplicationName returns the application_name of the drainer's dedicated LISTEN
// connection for table, so operators (and tests) can find it in pg_stat_activity.
func ListenerApplicationName(table string) string {
	name := "pgdrain listen " + canonicalTable(table)
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// listen keeps a dedicated connection (not from the pool: it would pin a pooled connection
// forever) LISTENing on the queue's channel and wakes the loop on each notification. When the
// connection drops it reconnects with backoff, and wakes the loop once connected again because
// notifications sent in between are lost. ready is closed after the first LISTEN attempt.
func (r *runner[T]) listen(ctx context.Context, ready chan struct{}) {
	markReady := sync.OnceFunc(func() { close(ready) })
	defer markReady()
	delay := listenRetryMin
	for ctx.Err() == nil {
		connected, err := r.listenOnce(ctx, markReady)
		markReady()
		if ctx.Err() != nil {
			return
		}
		if connected {
			delay = listenRetryMin
		}
		r.d.logger.WarnContext(ctx, "LISTEN connection lost; reconnecting (polling meanwhile)", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, listenRetryMax)
	}
}

// listenOnce connects, LISTENs and forwards notifications until the connection fails.
func (r *runner[T]) listenOnce(ctx context.Context, onListening func()) (connected bool, err error) {
	cc := r.d.pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = ListenerApplicationName(r.reg.queue)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, fmt.Errorf("connecting: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{r.reg.channel}.Sanitize()); err != nil {
		return false, fmt.Errorf("listening on %s: %w", r.reg.channel, err)
	}
	onListening()
	r.signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return true, fmt.Errorf("waiting for notification: %w", err)
		}
		r.signal()
	}
}
