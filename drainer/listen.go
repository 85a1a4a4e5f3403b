package drainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// listenRetryMin and listenRetryMax bound the pause between LISTEN reconnection attempts.
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 5 * time.Second
	// listenCloseTimeout bounds closing the LISTEN connection.
	listenCloseTimeout = time.Second
	// listenCallTimeout bounds each statement of the LISTEN connection (and acquiring it): a
	// connection to a host that vanished without a reset is abandoned, not waited on.
	listenCallTimeout = 10 * time.Second
	// listenIdleCheck is how long the LISTEN connection may stay silent before it is checked with a
	// bounded round trip: a wait for notifications sends nothing, so on a dead peer it would last
	// until TCP keepalive gives up (minutes) while the drainers only poll.
	listenIdleCheck = 30 * time.Second
)

// The drainers of a process that share a pool share one LISTEN connection: a listener, kept in
// listeners by pool, that exists while at least one of them runs. Its connection is acquired
// from the pool and hijacked (so it is made exactly like the pool's other connections:
// BeforeConnect, AfterConnect, the pool's runtime parameters, and then it no longer counts against
// MaxConns nor pins a pooled connection). It LISTENs on the union of the running drainers'
// channels, adding and removing channels as drainers start and stop, and wakes the drainers of a
// channel on each NOTIFY. When the connection dies it reconnects with backoff and then wakes every
// drainer, because NOTIFYs sent in between are lost.
var listeners = struct {
	mu    sync.Mutex
	byKey map[*pgxpool.Pool]*listener
}{byKey: map[*pgxpool.Pool]*listener{}}

// ListenerPID returns the backend process id of the LISTEN connection that the drainers running on
// pool share (pg_stat_activity.pid, as pg_backend_pid() reports it, so also behind a pooler), or 0
// when none is connected and LISTENing. pool is the listen pool: WithListenPool's when given. For
// operators and tests: the connection carries the pool's own settings (application_name
// included), so this is how to tell it apart.
func ListenerPID(pool *pgxpool.Pool) uint32 {
	listeners.mu.Lock()
	l := listeners.byKey[pool]
	listeners.mu.Unlock()
	if l == nil {
		return 0
	}
	return l.pid.Load()
}

// listener is the LISTEN connection of one pool.
type listener struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	// checkPooler: warn (once) when the connection goes through a pooler. Off for a pool given
	// to WithListenPool, which its owner chose for LISTEN.
	checkPooler  bool
	warnedPooler bool
	cancel       context.CancelFunc
	done         chan struct{}
	pid          atomic.Uint32

	mu        sync.Mutex
	subs      map[*subscription]struct{}
	dirty     bool               // the channel set changed since the last LISTEN/UNLISTEN
	interrupt context.CancelFunc // ends the current WaitForNotification, nil when not waiting
}

// subscription is one running drainer's interest in a channel.
type subscription struct {
	l       *listener
	channel string
	wake    func(notified bool) // notified: a NOTIFY, not a reconnection
	ready   chan struct{}       // closed once the channel is LISTENed, or an attempt to do so failed
	readyFn func()
}

// subscribe adds channel to pool's listener (starting it if needed); wake is called on each
// NOTIFY on channel (notified true) and after each reconnection (false). wake must not block.
// checkPooler applies when the call starts the listener.
func subscribe(pool *pgxpool.Pool, channel string, wake func(notified bool), logger *slog.Logger, checkPooler bool) *subscription {
	listeners.mu.Lock()
	defer listeners.mu.Unlock()
	l := listeners.byKey[pool]
	if l == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l = &listener{pool: pool, logger: logger, checkPooler: checkPooler, cancel: cancel, done: make(chan struct{}),
			subs: map[*subscription]struct{}{}}
		listeners.byKey[pool] = l
		go func() {
			defer close(l.done)
			l.run(ctx)
		}()
	}
	s := &subscription{l: l, channel: channel, wake: wake, ready: make(chan struct{})}
	s.readyFn = sync.OnceFunc(func() { close(s.ready) })
	l.mu.Lock()
	l.subs[s] = struct{}{}
	l.changed()
	l.mu.Unlock()
	return s
}

// close removes the subscription; the last one stops the listener and closes its connection
// before close returns.
func (s *subscription) close() {
	l := s.l
	listeners.mu.Lock()
	l.mu.Lock()
	delete(l.subs, s)
	last := len(l.subs) == 0
	if last {
		delete(listeners.byKey, l.pool)
	} else {
		l.changed()
	}
	l.mu.Unlock()
	listeners.mu.Unlock()
	if last {
		l.cancel()
		<-l.done
	}
}

// current is the channel the subscription listens on.
func (s *subscription) current() string {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.channel
}

// retarget moves the subscription to channel (the queue's registration names another one now).
func (s *subscription) retarget(channel string) {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.channel != channel {
		s.channel = channel
		l.changed()
	}
}

// changed marks the channel set as changed and interrupts the wait. l.mu must be held.
func (l *listener) changed() {
	l.dirty = true
	if l.interrupt != nil {
		l.interrupt()
	}
}

// snapshot returns the channels wanted now and the subscriptions, and clears dirty.
func (l *listener) snapshot() (channels []string, subs []*subscription) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dirty = false
	for s := range l.subs {
		subs = append(subs, s)
		if !slices.Contains(channels, s.channel) {
			channels = append(channels, s.channel)
		}
	}
	slices.Sort(channels)
	return channels, subs
}

// run keeps a connection LISTENing until ctx ends, reconnecting with backoff.
func (l *listener) run(ctx context.Context) {
	delay := listenRetryMin
	for ctx.Err() == nil {
		connected, err := l.session(ctx)
		l.pid.Store(0)
		if ctx.Err() != nil {
			return
		}
		// Drainers waiting for their first LISTEN poll meanwhile.
		_, subs := l.snapshot()
		l.mu.Lock()
		l.dirty = true // LISTEN everything again on the next connection
		l.mu.Unlock()
		for _, s := range subs {
			s.readyFn()
		}
		if connected {
			delay = listenRetryMin
		}
		l.logger.WarnContext(ctx, "LISTEN connection lost; reconnecting (polling meanwhile)", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, listenRetryMax)
	}
}

// session acquires a connection from the pool, hijacks it, LISTENs and forwards notifications
// until the connection fails or ctx ends.
func (l *listener) session(ctx context.Context) (connected bool, err error) {
	actx, cancel := context.WithTimeout(ctx, listenCallTimeout)
	pc, err := l.pool.Acquire(actx)
	cancel()
	if err != nil {
		return false, fmt.Errorf("acquiring a connection: %w", err)
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listenCloseTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if err := settleSession(ctx, conn); err != nil {
		return false, err
	}
	pid, err := l.backendPID(ctx, conn)
	if err != nil {
		return false, err
	}
	silentSince := time.Now()
	listening := map[string]bool{}
	fresh := true
	for {
		l.mu.Lock()
		dirty := l.dirty
		l.mu.Unlock()
		if dirty || fresh {
			channels, subs := l.snapshot()
			if err := syncChannels(ctx, conn, listening, channels); err != nil {
				return !fresh, err
			}
			l.pid.Store(pid)
			for _, s := range subs {
				s.readyFn()
				if fresh {
					s.wake(false) // a new connection: NOTIFYs sent while there was none are lost
				}
			}
			fresh = false
		}

		l.mu.Lock()
		if l.dirty {
			l.mu.Unlock()
			continue
		}
		// The wait ends at a NOTIFY, when the channel set changes (interrupt), or after
		// listenIdleCheck of silence, when a bounded round trip checks that the server still answers.
		wctx, interrupt := context.WithDeadline(ctx, silentSince.Add(listenIdleCheck))
		l.interrupt = interrupt
		l.mu.Unlock()
		n, err := conn.WaitForNotification(wctx)
		l.mu.Lock()
		l.interrupt = nil
		l.mu.Unlock()
		interrupted := wctx.Err() != nil
		checkDue := errors.Is(wctx.Err(), context.DeadlineExceeded)
		interrupt()
		switch {
		case err == nil:
			l.notify(n.Channel)
			silentSince = time.Now()
		case ctx.Err() != nil:
			return true, ctx.Err()
		case checkDue && !conn.IsClosed():
			if err := l.ping(ctx, conn); err != nil {
				return true, err
			}
			silentSince = time.Now()
		case interrupted && !conn.IsClosed():
			// The channel set changed: LISTEN/UNLISTEN at the top of the loop.
		default:
			return true, fmt.Errorf("waiting for notification: %w", err)
		}
	}
}

// backendPID returns the pid of the server process that runs conn's statements, and warns (once
// per listener) when it is not the one conn was given at connect: a pooler is in between, and
// behind a transaction pooler the server connection that ran LISTEN goes back to the pooler's
// pool after it, so no NOTIFY reaches this connection. Simple protocol: a pooler in transaction
// mode keeps no prepared statement (and this is the first statement of a fresh connection).
func (l *listener) backendPID(ctx context.Context, conn *pgx.Conn) (uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, listenCallTimeout)
	defer cancel()
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return 0, fmt.Errorf("reading the backend pid: %w", err)
	}
	if l.checkPooler && !l.warnedPooler && pid != conn.PgConn().PID() {
		l.warnedPooler = true
		l.logger.WarnContext(ctx, "the LISTEN connection reaches PostgreSQL through a connection pooler: behind a transaction "+
			"pooler (PgBouncer pool_mode=transaction) no NOTIFY reaches it and drainers wake only every PollFallback; "+
			"give them a direct pool with drainer.WithListenPool, or set Config.PollOnly (docs/pgbouncer.md)",
			"connect_pid", conn.PgConn().PID(), "backend_pid", pid)
	}
	return pid, nil
}

// settleSession sets, in one round trip, what the LISTEN connection's session needs whatever a role
// or a database set:
//   - standard_conforming_strings on: pgx runs no simple-protocol statement without it (its own
//     escaping depends on it), and every statement of the LISTEN connection is simple protocol.
//     Hence pgconn, which makes no such check;
//   - idle_session_timeout off: the connection is idle by design, and a role's idle_session_timeout
//     (a DBA's guard against forgotten sessions) ended it every few seconds, each time a
//     reconnection and a poll. Its own liveness check (listenIdleCheck) bounds how long a dead one
//     goes unnoticed.
func settleSession(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, listenCallTimeout)
	defer cancel()
	if _, err := conn.PgConn().Exec(ctx, "SET standard_conforming_strings = on; SET idle_session_timeout = 0").ReadAll(); err != nil {
		return fmt.Errorf("setting standard_conforming_strings on and idle_session_timeout off for the LISTEN connection: %w", err)
	}
	return nil
}

// ping checks, within listenCallTimeout, that the server still answers on conn.
func (l *listener) ping(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, listenCallTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("checking the silent LISTEN connection: %w", err)
	}
	return nil
}

// syncChannels LISTENs on the channels in want that are not in listening and UNLISTENs the others,
// in one statement, and updates listening.
func syncChannels(ctx context.Context, conn *pgx.Conn, listening map[string]bool, want []string) error {
	var stmts []string
	for _, ch := range want {
		if !listening[ch] {
			stmts = append(stmts, "LISTEN "+pgx.Identifier{ch}.Sanitize())
		}
	}
	for ch := range listening {
		if !slices.Contains(want, ch) {
			stmts = append(stmts, "UNLISTEN "+pgx.Identifier{ch}.Sanitize())
		}
	}
	if len(stmts) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, listenCallTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, strings.Join(stmts, "; ")); err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("listening on %s: %w", strings.Join(want, ", "), err)
	}
	clear(listening)
	for _, ch := range want {
		listening[ch] = true
	}
	return nil
}

// notify wakes every subscription of channel.
func (l *listener) notify(channel string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs {
		if s.channel == channel {
			s.wake(true)
		}
	}
}
