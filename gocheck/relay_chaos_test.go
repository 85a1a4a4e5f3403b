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
	rcRejectKeys  = 30 // every 30th key's event of round rcRejectRound is refused (422) until requeued
	rcRejectRound = 2
	rcTimeout     = 300 * time.Millisecond
	rcWindow      = 15 * time.Second // chaos after the producer is done, at most
)

// TestRelayChaos relays one partitioned queue to a signed webhook with three relay replicas (as
// pgdrain_worker) while the replicas are stopped and restarted at random (a third of them killed:
// connections cut and no new ones, nothing in flight recorded) and the peer fails transiently:
// 503 with Retry-After (recorded as the row's next attempt), 500, and answers that come after the
// delivery's deadline although the peer kept the event (so the relay delivers it again). A few
// events are refused for good (422) until, with the producer done and those events poisoned, an
// operator (pgdrain_operator) requeues them: requeue_poisoned moves each to a new id at the tail
// of its key, and the peer then takes them. Lease mode, then lock mode.
//
// At the end: every event is sent, none is leased, every event reached the peer, per key the peer
// received events in commit order (the requeued ones last), and every delivery of an event, before
// and after its requeue, came with one webhook-id: the row's event_id. Duplicates are counted by
// event_id. With PGDRAIN_SOAK set the producer keeps going that much longer.
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

// rcPeer is the webhook endpoint: it verifies every signature and records what it kept, by
// webhook-id (the event_id).
type rcPeer struct {
	refusing   atomic.Bool  // refuse the reject events (422) while set
	lastRound  atomic.Int64 // the producer's last round, set before the requeue
	mu         sync.Mutex
	kept       map[string]int    // webhook-id -> times kept
	refused    map[string]int    // webhook-id -> times refused for good
	identityOf map[string]string // key/round -> webhook-id
	keptRound  map[string]int    // key -> round of the latest event kept
	violations []string          // the first 20
	violated   int
	badSigs    atomic.Int64
	calls      atomic.Int64
	late       atomic.Int64
}

// rcBody is what the peer reads from the Standard Webhooks envelope: the producer writes the key
// as the event type, and the round and whether to refuse it in the payload.
type rcBody struct {
	Type string `json:"type"`
	Data struct {
		Round  int  `json:"round"`
		Reject bool `json:"reject"`
	} `json:"data"`
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
	var b rcBody
	_ = json.Unmarshal(body, &b)
	id := r.Header.Get("webhook-id")
	p.identify(id, b)
	if b.Data.Reject && p.refusing.Load() {
		p.mu.Lock()
		p.refused[id]++
		p.mu.Unlock()
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
		p.keep(id, b)
		p.late.Add(1)
		<-r.Context().Done()
		return
	}
	p.keep(id, b)
	w.WriteHeader(http.StatusNoContent)
}

// identify checks that an event (key and round) always comes with one webhook-id.
func (p *rcPeer) identify(id string, b rcBody) {
	event := fmt.Sprintf("%s/%d", b.Type, b.Data.Round)
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev, seen := p.identityOf[event]; seen && prev != id {
		p.violate("event %s came as %s and as %s", event, prev, id)
	}
	p.identityOf[event] = id
}

// keep records a kept event and checks its key's order: rounds never go back, and a requeued
// event comes after every other event of its key.
func (p *rcPeer) keep(id string, b rcBody) {
	key, round := b.Type, b.Data.Round
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kept[id]++
	last, started := p.keptRound[key]
	switch {
	case b.Data.Reject:
		if last != int(p.lastRound.Load()) {
			p.violate("key %s: requeued round %d came before the key's last round (at round %d)", key, round, last)
		}
		return // the key's order goes on from its last round
	case started && round < last:
		p.violate("key %s: round %d after round %d", key, round, last)
	}
	p.keptRound[key] = round
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
	peer := &rcPeer{kept: map[string]int{}, refused: map[string]int{}, identityOf: map[string]string{}, keptRound: map[string]int{}}
	peer.refusing.Store(true)
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
				SELECT 'key-' || g, jsonb_build_object('round', $1::int, 'reject', g % $3 = 0 AND $1 = $4), 'key-' || g
				FROM generate_series(1, $2::int) g`, round, rcKeys, rcRejectKeys, rcRejectRound)
			if !assertNoErr(t, err, "producing") {
				return
			}
			produced.Add(tag.RowsAffected())
			peer.lastRound.Store(int64(round))
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
	// The refused events end poisoned (and their keys go on without them); then an operator
	// requeues them while the chaos goes on: each moves to a new id at its key's tail, with its
	// event_id, and the peer now takes them.
	const rejects = rcKeys / rcRejectKeys
	poisonedRejects := func() (n, others int64) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE (payload->>'reject')::boolean),
			count(*) FILTER (WHERE NOT (payload->>'reject')::boolean)
			FROM public.rchaos WHERE sent_at IS NULL AND attempt_count >= 10`).Scan(&n, &others))
		return n, others
	}
	drWaitFor(t, 2*time.Minute, "the refused events poisoned", func() bool { n, _ := poisonedRejects(); return n == rejects })
	_, wrongPoison := poisonedRejects()
	idsBefore := rcRejectIDs(t, db.Pool)
	peer.refusing.Store(false)
	var requeued int64
	require.NoError(t, loginPool(t, db, "pgdrain_operator").QueryRow(ctx, `SELECT outbox.requeue_poisoned('public.rchaos')`).Scan(&requeued))
	require.Equal(t, int64(rejects), requeued)
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

	var events, sent, leased int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE sent_at IS NOT NULL),
		       count(*) FILTER (WHERE lease_token IS NOT NULL OR leased_until IS NOT NULL)
		FROM public.rchaos`).Scan(&events, &sent, &leased))
	idsAfter := rcRejectIDs(t, db.Pool)
	rows, err := db.Pool.Query(ctx, `SELECT resource_id || '/' || (payload->>'round'), event_id::text FROM public.rchaos`)
	require.NoError(t, err)
	eventIDs := map[string]string{} // key/round -> event_id
	var event, eventID string
	_, err = pgx.ForEachRow(rows, []any{&event, &eventID}, func() error { eventIDs[event] = eventID; return nil })
	require.NoError(t, err)

	peer.mu.Lock()
	defer peer.mu.Unlock()
	var deliveries, notKept, wrongIdentity, movedRejects, refusedThenKept int64
	for _, n := range peer.kept {
		deliveries += int64(n)
	}
	for event, eventID := range eventIDs {
		if peer.kept[eventID] == 0 {
			notKept++
		}
		if peer.identityOf[event] != eventID {
			wrongIdentity++
		}
	}
	for eventID, before := range idsBefore {
		if after, ok := idsAfter[eventID]; ok && after > before {
			movedRejects++
		}
		if peer.refused[eventID] > 0 && peer.kept[eventID] > 0 {
			refusedThenKept++
		}
	}
	fmt.Printf("relay chaos %s: events=%d chaos=%s replicas stopped=%d (killed %d) peer calls=%d late answers=%d sent=%d requeued=%d duplicates (by event_id)=%d\n",
		mode, events, chaosFor.Round(time.Second), killed.Load(), abrupt.Load(), peer.calls.Load(), peer.late.Load(),
		sent, requeued, deliveries-int64(len(peer.kept)))

	require.Equal(t, produced.Load(), events, "every produced event is in the table")
	require.GreaterOrEqual(t, events, int64(rcKeys*rcRounds))
	require.Zero(t, peer.badSigs.Load(), "every request carried a valid signature")
	require.Equal(t, events, sent, "every event is sent, the requeued ones too: none lost, none stuck")
	require.Zero(t, wrongPoison, "only the events the peer refused were poisoned")
	require.Zero(t, leased, "no row is left leased")
	require.Zero(t, notKept, "every event reached the peer")
	require.Zero(t, wrongIdentity, "every event came with its row's event_id as webhook-id")
	require.Equal(t, int64(rejects), movedRejects, "requeue_poisoned moved each refused event to a new id")
	require.Equal(t, int64(rejects), refusedThenKept, "the peer saw one webhook-id before and after the requeue")
	require.Zero(t, peer.violated, "per key in commit order; one identity per event; the first: %v", peer.violations)
	require.Positive(t, abrupt.Load(), "replicas were killed")
	require.Positive(t, peer.late.Load(), "the peer answered late at least once (so the relay redelivered)")
}

// rcRejectIDs returns the row id of each refused event, by event_id.
func rcRejectIDs(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT event_id::text, id FROM public.rchaos WHERE (payload->>'reject')::boolean`)
	require.NoError(t, err)
	out := map[string]int64{}
	var eventID string
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&eventID, &id}, func() error { out[eventID] = id; return nil })
	require.NoError(t, err)
	return out
}
