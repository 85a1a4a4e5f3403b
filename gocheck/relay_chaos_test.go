package gocheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/testdb"
	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

const (
	rcKeys        = 150
	rcRounds      = 15 // one event per key per round
	rcReplicas    = 3
	rcRejectEvery = 997 // the peer refuses these ids for good (422): they must end poisoned
	rcTimeout     = 300 * time.Millisecond
	rcWindow      = 15 * time.Second // chaos after the producer is done, at most
)

// TestRelayChaos relays one partitioned queue to a signed webhook with three relay replicas (as
// pgdrain_worker) while the replicas are stopped and restarted at random (a third of them killed:
// connections cut and no new ones, nothing in flight recorded) and the peer fails transiently:
// 503 with Retry-After, 500, and answers that come after the delivery's deadline although the peer
// kept the event (so the relay delivers it again). Lease mode, then lock mode.
//
// At the end: every event is sent or poisoned (exactly those the peer refused), none is leased,
// every sent event reached the peer, per key the peer received events in commit (id) order, and an
// event received twice came with the same webhook-id both times (the identity to dedupe on).
// With PGDRAIN_SOAK set the producer keeps going that much longer.
func TestRelayChaos(t *testing.T) {
	t.Parallel()
	soak := time.Duration(0)
	if v := os.Getenv("PGDRAIN_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "PGDRAIN_SOAK")
		soak = d
	}
	for _, mode := range []drainer.ClaimMode{drainer.ClaimLease, drainer.ClaimLock} {
		t.Run(mode.String(), func(t *testing.T) { runRelayChaos(t, mode, soak) })
	}
}

// rcPeer is the webhook endpoint: it verifies every signature and records what it kept.
type rcPeer struct {
	mu         sync.Mutex
	kept       map[string]int    // webhook-id -> times kept
	identityOf map[string]string // key/round -> webhook-id
	lastID     map[string]int64  // key -> row id of the latest event kept
	violations []string          // the first 20
	violated   int
	badSigs    atomic.Int64
	calls      atomic.Int64
	late       atomic.Int64
}

func (p *rcPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.calls.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if webhook.Verify([]string{rlSecret}, r.Header, body, time.Now(), webhook.DefaultTolerance) != nil {
		p.badSigs.Add(1)
		w.WriteHeader(http.StatusUnauthorized) // permanent: would poison an event the check expects sent
		return
	}
	id := r.Header.Get("webhook-id")
	_, idText, _ := strings.Cut(id, ":")
	rowID, _ := strconv.ParseInt(idText, 10, 64)
	if rowID%rcRejectEvery == 0 {
		w.WriteHeader(http.StatusUnprocessableEntity)
		return
	}
	switch x := rand.Float64(); {
	case x < 0.20:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case x < 0.25:
		w.WriteHeader(http.StatusInternalServerError)
		return
	case x < 0.27:
		// Kept, but the answer comes after the delivery's deadline: the relay delivers it again.
		p.keep(id, body)
		p.late.Add(1)
		<-r.Context().Done()
		return
	}
	p.keep(id, body)
	w.WriteHeader(http.StatusNoContent)
}

func (p *rcPeer) keep(id string, body []byte) {
	var env struct {
		Data struct {
			Round int `json:"round"`
		} `json:"data"`
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &env)
	_, idText, _ := strings.Cut(id, ":")
	rowID, _ := strconv.ParseInt(idText, 10, 64)
	key := env.Type // the producer writes the key as the event type, so the peer can see it
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kept[id]++
	event := fmt.Sprintf("%s/%d", key, env.Data.Round)
	if prev, seen := p.identityOf[event]; seen && prev != id {
		p.violate("event %s came as %s and as %s", event, prev, id)
	}
	p.identityOf[event] = id
	if last := p.lastID[key]; rowID < last {
		p.violate("key %s: id %d after id %d", key, rowID, last)
	}
	p.lastID[key] = rowID
}

func (p *rcPeer) violate(format string, args ...any) {
	p.violated++
	if len(p.violations) < 20 {
		p.violations = append(p.violations, fmt.Sprintf(format, args...))
	}
}

// rcReplica is one relay process: its own pool, stopped gracefully or killed.
type rcReplica struct {
	name   string
	pool   *pgxpool.Pool
	dead   *atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
}

func runRelayChaos(t *testing.T, mode drainer.ClaimMode, soak time.Duration) {
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.rchaos', 'resource_id',
		backoff_min => '20 milliseconds', backoff_max => '200 milliseconds')`)
	require.NoError(t, err)
	workerURL := loginURL(t, db, "pgdrain_worker")
	peer := &rcPeer{kept: map[string]int{}, identityOf: map[string]string{}, lastID: map[string]int64{}}
	srv := httptest.NewServer(peer)
	defer srv.Close()

	var started, killed, abrupt atomic.Int64
	start := func(slot int) *rcReplica {
		name := fmt.Sprintf("rchaos-%s-%d-%d", mode, slot, started.Add(1))
		cfg, err := pgxpool.ParseConfig(workerURL)
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["application_name"] = name
		dead := &atomic.Bool{}
		cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
			if dead.Load() {
				return errors.New("replica is dead")
			}
			return nil
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		sink, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{rlSecret}})
		require.NoError(t, err)
		r, err := relay.New(pool, []relay.Route{{Queue: "public.rchaos", Sink: sink, SinkKind: "webhook",
			Drainer: drainer.Config{ClaimMode: mode, ApplyConcurrency: 32, ApplyTimeout: rcTimeout, PollFallback: 200 * time.Millisecond}}},
			relay.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		rep := &rcReplica{name: name, pool: pool, dead: dead, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(rep.done)
			_ = r.Run(rctx) // fails only at start (a killed connection): down until restarted, like a crash loop
		}()
		return rep
	}
	stop := func(r *rcReplica, kill bool) {
		killed.Add(1)
		if kill {
			abrupt.Add(1)
			r.dead.Store(true)
			_, _ = db.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, r.name)
		}
		r.cancel()
		<-r.done
		r.pool.Close()
	}

	var produced atomic.Int64
	producing := make(chan struct{})
	go func() {
		defer close(producing)
		deadline := time.Now().Add(soak)
		for round := 0; round < rcRounds || time.Now().Before(deadline); round++ {
			tag, err := db.Pool.Exec(ctx, `INSERT INTO public.rchaos (event_type, payload, resource_id)
				SELECT 'key-' || g, jsonb_build_object('round', $1::int), 'key-' || g FROM generate_series(1, $2::int) g`, round, rcKeys)
			if !assertNoErr(t, err, "producing") {
				return
			}
			produced.Add(tag.RowsAffected())
			time.Sleep(300 * time.Millisecond)
		}
	}()

	chaosCtx, stopChaos := context.WithCancel(ctx)
	slots := make([]*rcReplica, rcReplicas)
	var slotsMu sync.Mutex
	var wg sync.WaitGroup
	for i := range rcReplicas {
		slots[i] = start(i)
		wg.Go(func() {
			for {
				select {
				case <-chaosCtx.Done():
					return
				case <-time.After(time.Duration(500+rand.IntN(1500)) * time.Millisecond):
				}
				slotsMu.Lock()
				old := slots[i]
				slotsMu.Unlock()
				stop(old, rand.IntN(3) == 0)
				slotsMu.Lock()
				slots[i] = start(i)
				slotsMu.Unlock()
			}
		})
	}
	pending := func() int64 {
		var n int64
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM public.rchaos WHERE sent_at IS NULL AND attempt_count < 10`).Scan(&n)
		return n
	}
	began := time.Now()
	<-producing
	for until := time.Now().Add(rcWindow); time.Now().Before(until) && pending() > rcKeys/10; {
		time.Sleep(200 * time.Millisecond)
	}
	stopChaos()
	wg.Wait()
	chaosFor := time.Since(began)
	for limit := time.Now().Add(3 * time.Minute); time.Now().Before(limit) && pending() > 0; {
		time.Sleep(200 * time.Millisecond)
	}
	for _, r := range slots {
		stop(r, false)
	}

	var events, sent, poisoned, leased, wrongPoison int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE sent_at IS NOT NULL),
		       count(*) FILTER (WHERE sent_at IS NULL AND attempt_count >= 10),
		       count(*) FILTER (WHERE lease_token IS NOT NULL OR leased_until IS NOT NULL),
		       count(*) FILTER (WHERE (sent_at IS NULL) <> (id % $1 = 0))
		FROM public.rchaos`, rcRejectEvery).Scan(&events, &sent, &poisoned, &leased, &wrongPoison))
	rows, err := db.Pool.Query(ctx, `SELECT id FROM public.rchaos WHERE sent_at IS NOT NULL`)
	require.NoError(t, err)
	sentIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)

	peer.mu.Lock()
	defer peer.mu.Unlock()
	var deliveries, sentNotKept int64
	for _, n := range peer.kept {
		deliveries += int64(n)
	}
	for _, id := range sentIDs {
		if peer.kept[relay.EventIdentity("public.rchaos", id)] == 0 {
			sentNotKept++
		}
	}
	fmt.Printf("relay chaos %s: events=%d chaos=%s replicas stopped=%d (killed %d) peer calls=%d late answers=%d sent=%d poisoned=%d duplicates=%d\n",
		mode, events, chaosFor.Round(time.Second), killed.Load(), abrupt.Load(), peer.calls.Load(), peer.late.Load(),
		sent, poisoned, deliveries-int64(len(peer.kept)))

	require.Equal(t, produced.Load(), events, "every produced event is in the table")
	require.GreaterOrEqual(t, events, int64(rcKeys*rcRounds))
	require.Zero(t, peer.badSigs.Load(), "every request carried a valid signature")
	require.Equal(t, events, sent+poisoned, "every event is sent or poisoned: none lost, none stuck")
	require.Zero(t, wrongPoison, "exactly the events the peer refused are poisoned")
	require.Zero(t, leased, "no row is left leased")
	require.Zero(t, sentNotKept, "every sent event reached the peer")
	require.Zero(t, peer.violated, "per key in commit order; one identity per event; the first: %v", peer.violations)
	require.Positive(t, abrupt.Load(), "replicas were killed")
	require.Positive(t, peer.late.Load(), "the peer answered late at least once (so the relay redelivered)")
}
