package gocheck

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/lastscrape"
	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

// A network partition between a drainer and PostgreSQL, mid-delivery (issue 30 item 5). Drainer A
// reaches the server through a partitionLink (a TCP proxy this test cuts and heals); drainer B
// reaches it directly. A claims a batch and delivers it to the peer; the link is cut while the
// deliveries are in flight (their results not yet recorded); B is started; A's deliveries return.
// Then, per case:
//
//   - lease/stall: the partition heals once A's leases ran out and B took the rows, while A still
//     waits for the answer to its results: the results A sent before the heal reach the server late (as TCP retransmission delivers them)
//     and are refused by the token: A counts each (pgdrain_outbox_lease_lost_total).
//   - lease/reset: both ends get resets; A retries recording while the leases last, then drops the
//     results; the rows go to B when the leases end.
//   - lock/blackhole: the server keeps A's abandoned claim transaction, idle in transaction, with
//     its row locks, until idle_in_transaction_session_timeout ends it (the drainer sets it for its
//     claim transactions, above LockTransactionTimeout; A's role has none); then B takes the rows.
//   - lock/reset: the server's backend gets a reset and ends at once, freeing the row locks.
//   - relay: a relay (lease mode, webhook sink) cut off by a blackhole, another relay direct.
//
// Every case then shows: the rows A held went to B (delivered again: those A had delivered); A
// delivered nothing while cut off (its claims failed, with backoff, or waited for the heal);
// redeliveries are at most the rows A held at the cut, although the partition outlasts their
// leases; after the heal A (alone, B stopped) drains new rows; every event is sent,
// none is leased, each reached the peer, per key in commit order; an audit trigger finds no result
// written with a stale token and no row marked sent twice. Run as pgdrain_worker. The figures are
// logged ("partition <case>: ...").
func TestPartition(t *testing.T) {
	t.Parallel()
	for _, c := range []ptCase{
		{name: "lease/stall", mode: drainer.ClaimLease, cut: cutStall},
		{name: "lease/reset", mode: drainer.ClaimLease, cut: cutReset},
		{name: "lock/blackhole", mode: drainer.ClaimLock, cut: cutBlackhole},
		{name: "lock/reset", mode: drainer.ClaimLock, cut: cutReset},
		{name: "relay/blackhole", mode: drainer.ClaimLease, cut: cutBlackhole, relay: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runPartition(t, c)
		})
	}
}

const (
	ptKeys    = 20
	ptSeqs    = 10 // events per key before the partition
	ptAfter   = 2  // events per key after it
	ptBatch   = 8
	ptApply   = 4 * time.Second                  // ApplyTimeout
	ptLease   = 6 * time.Second                  // lease mode: Lease and ClaimTimeout
	ptLockTx  = 5 * time.Second                  // lock mode: LockTransactionTimeout (at least ApplyTimeout + LeaseMargin)
	ptIdleTx  = ptLockTx + 2*drainer.LeaseMargin // lock mode: what the drainer sets for its claim transactions
	ptStallBy = 3500 * time.Millisecond
)

type ptCase struct {
	name  string
	mode  drainer.ClaimMode
	cut   cutKind
	relay bool
}

// ptDelivery is one delivery the peer saw.
type ptDelivery struct {
	by       string // "A" (cut off) or "B"
	identity string // the row id (drainers) or webhook-id (relay)
	key      string
	seq      int
	at       time.Time
}

// ptPeer records deliveries in arrival order. While the gate is closed, A's deliveries wait at
// it after being recorded (the peer has the event; the drainer has no answer yet).
type ptPeer struct {
	mu    sync.Mutex
	log   []ptDelivery
	gate  chan struct{}
	gated []string // identities waiting at (or released from) the gate
}

func (p *ptPeer) deliver(ctx context.Context, by, identity string, e drEvent) error {
	p.mu.Lock()
	p.log = append(p.log, ptDelivery{by: by, identity: identity, key: e.Key, seq: e.Seq, at: time.Now()})
	wait := false
	if by == "A" {
		select {
		case <-p.gate:
		default:
			wait = true
			p.gated = append(p.gated, identity)
		}
	}
	p.mu.Unlock()
	if wait {
		select {
		case <-p.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (p *ptPeer) snapshot() ([]ptDelivery, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log), slices.Clone(p.gated)
}

// ptSide is one drainer (or relay) of the check.
type ptSide struct {
	stop    func() error
	log     *syncBuffer
	metrics prometheus.Gatherer
}

func runPartition(t *testing.T, c ptCase) {
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
	ctx := context.Background()
	_, err := q.pool.Exec(ctx, chaosAuditSQL(q.table))
	require.NoError(t, err)
	ptProduce(t, q, 0, ptSeqs)
	total := ptKeys * ptSeqs

	urlA, loginA := ptLogin(t, q)
	urlB, _ := ptLogin(t, q)
	direct, err := url.Parse(urlA)
	require.NoError(t, err)
	link := startPartitionLink(t, direct.Host)
	proxied := *direct
	proxied.Host = link.addr()
	qs := proxied.Query()
	qs.Set("connect_timeout", "2") // bounds a dial the pool goes on with in the background
	// A pool that keeps its connections (as a busy drainer's does): results recorded during
	// the partition go over a connection of the moment, not a new dial (connect_timeout bounds
	// that, and a dial that fails carries nothing late).
	qs.Set("pool_max_conns", "4")
	qs.Set("pool_min_conns", "4")
	proxied.RawQuery = qs.Encode()
	poolA := ptPool(t, proxied.String())
	poolB := ptPool(t, urlB)
	// Cleanups run last first: the link goes before poolA, whose blackholed connections would
	// otherwise keep its Close waiting (pgxpool gives each Close 15s).
	t.Cleanup(link.close)

	peer := &ptPeer{gate: make(chan struct{})}
	var eventIDs map[int64]string
	if c.relay {
		eventIDs = rlEventIDs(t, q.pool, q.table)
	}
	start := func(name string, pool *pgxpool.Pool) *ptSide {
		if c.relay {
			return ptStartRelay(t, q, c, name, pool, peer)
		}
		return ptStartDrainer(t, q, c, name, pool, peer)
	}

	// A alone takes a batch; its deliveries reach the peer and wait there for an answer.
	a := start("A", poolA)
	drWaitFor(t, 30*time.Second, "A's first batch at the peer", func() bool {
		_, gated := peer.snapshot()
		return len(gated) >= ptBatch
	})
	claimedAt := time.Now()
	// What A holds: its leases, or (lock mode) the rows of its open claim transaction, all of
	// them at the peer.
	held := q.count(t, `SELECT count(*) FROM public.events WHERE sent_at IS NULL AND lease_token IS NOT NULL`)
	if c.mode == drainer.ClaimLock {
		_, gated := peer.snapshot()
		held = int64(len(gated))
	}

	// The cut, mid-delivery; B starts; A's deliveries return (sent).
	link.partition(c.cut)
	cutAt := time.Now()
	b := start("B", poolB)
	if c.cut == cutStall {
		// Results that come back late, not lost: A records them just before it gives up on the
		// flush, so they reach the server only after their leases ended and B took the rows.
		time.Sleep(time.Until(claimedAt.Add(ptStallBy)))
	}
	close(peer.gate)
	_, gated := peer.snapshot()

	// Lock mode: when did the server end A's claim transaction (and free its row locks)?
	var txEndedAfter time.Duration
	var lastStatementToEnd time.Duration
	if c.mode == drainer.ClaimLock {
		lastStatementToEnd, txEndedAfter = ptWatchTxEnd(t, q, loginA, cutAt)
	}

	// The rows A held go to B.
	drWaitFor(t, 60*time.Second, "B delivered the rows A had at the peer", func() bool {
		log, _ := peer.snapshot()
		byB := map[string]bool{}
		for _, d := range log {
			if d.by == "B" {
				byB[d.identity] = true
			}
		}
		for _, id := range gated {
			if !byB[id] {
				return false
			}
		}
		return true
	})
	log, _ := peer.snapshot()
	var movedAt time.Time
	for _, d := range log {
		if d.by == "B" && slices.Contains(gated, d.identity) {
			movedAt = d.at
			break
		}
	}
	// The heal, as soon as B has them (the stall case: while A still waits for its results' answer).
	claimsFailed := strings.Count(a.log.String(), "claiming batch failed")
	link.heal()
	healAt := time.Now()
	log, _ = peer.snapshot()
	aWhileCut := 0
	for _, d := range log {
		if d.by == "A" && d.at.After(cutAt) && d.at.Before(healAt) {
			aWhileCut++
		}
	}

	// Then B stops, and A alone must drain what comes next.
	drWaitFor(t, 60*time.Second, "every row sent", func() bool { return q.sent(t) == int64(total) })
	require.NoError(t, b.stop())
	producedAt := time.Now()
	ptProduce(t, q, ptSeqs, ptAfter)
	total += ptKeys * ptAfter
	drWaitFor(t, 60*time.Second, "A drained the rows written after the heal", func() bool { return q.sent(t) == int64(total) })
	recovered := time.Since(producedAt)
	require.NoError(t, a.stop())

	// Nothing lost, nothing leased, per-key order, fencing.
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE sent_at IS NULL OR lease_token IS NOT NULL`))
	log, _ = peer.snapshot()
	ptRequireKeyOrder(t, log, ptSeqs+ptAfter)
	seen := map[string]int{}
	firstA := time.Time{}
	for _, d := range log {
		seen[d.identity]++
		if d.by == "A" && d.at.After(healAt) && firstA.IsZero() {
			firstA = d.at
		}
	}
	if c.relay {
		require.Len(t, seen, len(eventIDs)+ptKeys*ptAfter, "every event reached the peer")
	} else {
		require.Len(t, seen, total, "every event reached the peer")
	}
	again := len(log) - len(seen)
	stale, doubleSent := chaosAuditFindings(t, q.pool, q.table, c.mode == drainer.ClaimLease)
	require.Zero(t, stale, "a result was written with a stale token (or over a live lease)")
	require.Zero(t, doubleSent, "a row was marked sent twice")
	require.Zero(t, aWhileCut, "A delivered nothing while cut off")
	require.LessOrEqual(t, again, int(held), "redeliveries: at most the rows A held at the cut")
	require.GreaterOrEqual(t, again, len(gated), "A's deliveries in flight at the cut were delivered again by B")
	refused := 0.0 // lock mode has no tokens: a late settle dies with its transaction
	if c.mode == drainer.ClaimLease {
		refused = drMetric(t, a.metrics, "pgdrain_outbox_lease_lost_total", nil)
	}
	if c.cut == cutStall {
		require.Equal(t, float64(len(gated)), refused, "A's late results reached the server and were refused")
	}
	require.NotContains(t, a.log.String(), "level=ERROR", "every failure was classified as the database being unavailable")

	msg := fmt.Sprintf("partition %s: rows=%d, A held %d at the cut (%d delivered, unanswered), delivered=%d, redelivered=%d, "+
		"refused late results=%.0f, A's failed claims while cut=%d, rows to B %s after the cut, partition %s, "+
		"A's first delivery %s after the heal, A alone drained %d rows written %s after the heal in %s",
		c.name, total, held, len(gated), len(log), again, refused, claimsFailed, movedAt.Sub(cutAt).Round(time.Millisecond),
		healAt.Sub(cutAt).Round(time.Millisecond), firstA.Sub(healAt).Round(time.Millisecond), ptKeys*ptAfter,
		producedAt.Sub(healAt).Round(time.Millisecond), recovered.Round(time.Millisecond))
	switch {
	case c.mode == drainer.ClaimLock && lastStatementToEnd > 0:
		msg += fmt.Sprintf(", the server ended A's claim transaction (freeing its row locks) %s after the cut, %s after its last statement "+
			"(idle_in_transaction_session_timeout %s)", txEndedAfter.Round(time.Millisecond), lastStatementToEnd.Round(time.Millisecond), ptIdleTx)
	case c.mode == drainer.ClaimLock:
		msg += fmt.Sprintf(", the server ended A's claim transaction (freeing its row locks) within %s of the cut", txEndedAfter.Round(time.Millisecond))
	}
	t.Log(msg)
}

// ptProduce writes seqs events per key, seq from..from+seqs-1, in key order within each seq.
func ptProduce(t *testing.T, q *drQueue, from, seqs int) {
	t.Helper()
	_, err := q.pool.Exec(context.Background(), `
		INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'ev', jsonb_build_object('key', 'k' || k, 'op', 'ev', 'seq', s), 'k' || k
		FROM generate_series($1::int, $1::int + $2::int - 1) s, generate_series(1, $3::int) k ORDER BY s, k`, from, seqs, ptKeys)
	require.NoError(t, err)
}

// ptLogin is a pgdrain_worker login with no idle_in_transaction_session_timeout of its own: in
// lock mode what bounds a claim transaction whose client is gone is the drainer's.
func ptLogin(t *testing.T, q *drQueue) (dsn, login string) {
	t.Helper()
	dsn = loginURL(t, q.db, "pgdrain_worker")
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	login = u.User.Username()
	var idle string
	require.NoError(t, q.pool.QueryRow(context.Background(), `SELECT coalesce((SELECT s FROM pg_catalog.pg_db_role_setting,
		unnest(setconfig) s WHERE setrole = $1::regrole AND s LIKE 'idle_in_transaction_session_timeout=%'), '')`, login).Scan(&idle))
	require.Empty(t, idle, "the login's role sets no idle_in_transaction_session_timeout")
	return dsn, login
}

func ptPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func ptConfig(q *drQueue, c ptCase) drainer.Config {
	cfg := q.config(c.mode)
	cfg.BatchSize, cfg.ApplyConcurrency, cfg.ApplyTimeout = ptBatch, ptBatch, ptApply
	cfg.PollFallback = 500 * time.Millisecond
	if c.mode == drainer.ClaimLease {
		cfg.Lease, cfg.ClaimTimeout = ptLease, ptLease
	} else {
		cfg.Lease, cfg.LockTransactionTimeout, cfg.ClaimTimeout = 0, ptLockTx, 2*time.Second
	}
	return cfg
}

func ptStartDrainer(t *testing.T, q *drQueue, c ptCase, name string, pool *pgxpool.Pool, peer *ptPeer) *ptSide {
	t.Helper()
	logger, buf := drCapture(t)
	d, reg := drNew(t, pool, ptConfig(q, c), func(ctx context.Context, _ string, e drEvent) error {
		ev, _ := drainer.EventFrom(ctx)
		return peer.deliver(ctx, name, fmt.Sprint(ev.ID), e)
	}, drainer.WithLogger[drEvent](logger))
	return &ptSide{stop: drStart(t, d), log: buf, metrics: reg}
}

// ptStartRelay runs a relay of q to a webhook receiver that hands each event to peer as name.
func ptStartRelay(t *testing.T, q *drQueue, c ptCase, name string, pool *pgxpool.Pool, peer *ptPeer) *ptSide {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || webhook.Verify([]string{rlSecret}, r.Header, body, time.Now(), webhook.DefaultTolerance) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var env struct {
			Data drEvent `json:"data"`
		}
		if json.Unmarshal(body, &env) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if peer.deliver(r.Context(), name, r.Header.Get("webhook-id"), env.Data) != nil {
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	sink, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{rlSecret}})
	require.NoError(t, err)
	cfg := ptConfig(q, c)
	route := relay.Route{Queue: q.table, Sink: sink, SinkKind: "webhook", Drainer: cfg}
	route.Drainer.Table = ""
	logger, buf := drCapture(t)
	reg := lastscrape.New() // keeps what the relay's drainer exported after Run returned
	r, err := relay.New(pool, []relay.Route{route}, relay.WithLogger(logger), relay.WithMetrics(reg))
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return fmt.Errorf("relay %s: Run did not return within 30s of cancellation", name)
		}
	})
	t.Cleanup(func() { _ = stop() })
	return &ptSide{stop: stop, log: buf, metrics: reg}
}

// ptWatchTxEnd waits until no backend of login is idle in a transaction (the server ended A's
// claim transaction, freeing its row locks) and returns how long after that backend's last
// statement and after the cut that happened.
func ptWatchTxEnd(t *testing.T, q *drQueue, login string, cutAt time.Time) (sinceLastStatement, sinceCut time.Duration) {
	t.Helper()
	var lastStatement time.Time
	drWaitFor(t, 60*time.Second, "the server ended A's claim transaction", func() bool {
		var at *time.Time
		require.NoError(t, q.pool.QueryRow(context.Background(), `
			SELECT max(state_change) FROM pg_catalog.pg_stat_activity
			WHERE usename = $1 AND state IN ('idle in transaction', 'idle in transaction (aborted)')`, login).Scan(&at))
		if at != nil {
			lastStatement = *at
			return false
		}
		return true
	})
	now := time.Now()
	if lastStatement.IsZero() {
		return 0, now.Sub(cutAt)
	}
	return now.Sub(lastStatement), now.Sub(cutAt)
}

// ptRequireKeyOrder checks the peer's log, in arrival order: per key, a delivery is of the same
// event as the key's previous one (delivered again) or of the next, never an earlier one; and
// every key got all n events.
func ptRequireKeyOrder(t *testing.T, log []ptDelivery, n int) {
	t.Helper()
	last := map[string]int{}
	for _, d := range log {
		prev, started := last[d.key]
		if !started {
			prev = -1
		}
		require.Contains(t, []int{prev, prev + 1}, d.seq, "key %s: seq %d delivered (by %s) after seq %d", d.key, d.seq, d.by, prev)
		last[d.key] = d.seq
	}
	require.Len(t, last, ptKeys)
	for key, seq := range last {
		require.Equal(t, n-1, seq, "key %s: the last event delivered", key)
	}
}
