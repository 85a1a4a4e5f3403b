package gocheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
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

// fcSink is the second sink of the fan-out chaos run: it takes every event and checks, like
// rcPeer, that each key's rounds never go back and that an event always comes with one identity.
type fcSink struct {
	mu         sync.Mutex
	kept       map[string]int    // identity -> times kept
	identityOf map[string]string // key/round -> identity
	keptRound  map[string]int
	violations []string
}

func (s *fcSink) Deliver(_ context.Context, events []relay.Event) []relay.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		var p struct {
			Round int `json:"round"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		event := fmt.Sprintf("%s/%d", e.Type, p.Round)
		if prev, seen := s.identityOf[event]; seen && prev != e.Identity {
			s.violations = append(s.violations, fmt.Sprintf("event %s came as %s and as %s", event, prev, e.Identity))
		}
		s.identityOf[event] = e.Identity
		if last, started := s.keptRound[e.Type]; started && p.Round < last {
			s.violations = append(s.violations, fmt.Sprintf("key %s: round %d after round %d", e.Type, p.Round, last))
		}
		s.keptRound[e.Type] = p.Round
		s.kept[e.Identity]++
	}
	return make([]relay.Result, len(events))
}

func (s *fcSink) Close() error { return nil }

// TestRelayFanOutChaos fans one partitioned queue out to two sinks (a signed webhook that fails
// transiently and answers late, as in TestRelayChaos, drained in lease mode; and a sink that takes
// everything, drained in lock mode) with three relay replicas, each running the fan-out and both
// sinks, stopped and restarted at random while a producer writes (a third of the stops kill the
// replica: connections cut, nothing in flight recorded). At the end every event is copied once into
// each sink's queue and sent there, each sink got every event under the source row's event_id, each
// key's events in commit order.
func TestRelayFanOutChaos(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.fchaos', 'resource_id',
		backoff_min => '20 milliseconds', backoff_max => '200 milliseconds')`)
	require.NoError(t, err)
	for _, sink := range []string{"hooks", "all"} {
		_, err := relay.AddFanOutSink(ctx, db.Pool, "public.fchaos", sink, relay.FromNow)
		require.NoError(t, err)
	}
	relayURL := foLoginURL(t, db)
	peer := &rcPeer{kept: map[string]int{}, refused: map[string]int{}, identityOf: map[string]string{}, keptRound: map[string]int{}}
	srv := httptest.NewServer(peer)
	defer srv.Close()
	all := &fcSink{kept: map[string]int{}, identityOf: map[string]string{}, keptRound: map[string]int{}}

	var started, killed, abrupt atomic.Int64
	start := func(slot int) *rcReplica {
		name := fmt.Sprintf("fchaos-%d-%d", slot, started.Add(1))
		cfg, err := pgxpool.ParseConfig(relayURL)
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
		hook, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{rlSecret}})
		require.NoError(t, err)
		r, err := relay.New(pool, []relay.Route{
			{Queue: "public.fchaos__hooks", Sink: hook, SinkKind: "webhook",
				Drainer: drainer.Config{ApplyConcurrency: 32, ApplyTimeout: rcTimeout, PollFallback: 200 * time.Millisecond}},
			{Queue: "public.fchaos__all", Sink: all, SinkKind: "all", BatchSize: 8,
				Drainer: drainer.Config{ClaimMode: drainer.ClaimLock, ApplyConcurrency: 8, ApplyTimeout: rcTimeout, PollFallback: 200 * time.Millisecond}},
		}, relay.WithFanOut(relay.FanOut{Queue: "public.fchaos", BatchSize: 64, PollFallback: 200 * time.Millisecond}),
			relay.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		rep := &rcReplica{name: name, pool: pool, dead: dead, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(rep.done)
			_ = r.Run(rctx) // fails only at start (a killed connection): down until restarted
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

	producing := make(chan struct{})
	go func() {
		defer close(producing)
		for round := range rcRounds {
			_, err := db.Pool.Exec(ctx, `INSERT INTO public.fchaos (event_type, payload, resource_id)
				SELECT 'key-' || g, jsonb_build_object('round', $1::int), 'key-' || g FROM generate_series(1, $2::int) g`, round, rcKeys)
			if !assertNoErr(t, err, "producing") {
				return
			}
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
		_ = db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM public.fchaos WHERE sent_at IS NULL)
			+ (SELECT count(*) FROM public.fchaos__hooks WHERE sent_at IS NULL)
			+ (SELECT count(*) FROM public.fchaos__all WHERE sent_at IS NULL)`).Scan(&n)
		return n
	}
	<-producing
	for until := time.Now().Add(rcWindow); time.Now().Before(until) && pending() > rcKeys/10; {
		time.Sleep(200 * time.Millisecond)
	}
	stopChaos()
	wg.Wait()
	for limit := time.Now().Add(3 * time.Minute); time.Now().Before(limit) && pending() > 0; {
		time.Sleep(200 * time.Millisecond)
	}
	for _, r := range slots {
		stop(r, false)
	}

	const events = rcKeys * rcRounds
	var source, hooks, allRows, hooksSent, allSent, copiesPerEvent int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM public.fchaos WHERE sent_at IS NOT NULL),
		(SELECT count(*) FROM public.fchaos__hooks), (SELECT count(*) FROM public.fchaos__all),
		(SELECT count(*) FROM public.fchaos__hooks WHERE sent_at IS NOT NULL),
		(SELECT count(*) FROM public.fchaos__all WHERE sent_at IS NOT NULL),
		(SELECT max(n) FROM (SELECT count(*) AS n FROM (SELECT event_id FROM public.fchaos__hooks
		                                                UNION ALL SELECT event_id FROM public.fchaos__all) u GROUP BY event_id) c)`).
		Scan(&source, &hooks, &allRows, &hooksSent, &allSent, &copiesPerEvent))
	rows, err := db.Pool.Query(ctx, `SELECT event_type || '/' || (payload->>'round'), event_id::text FROM public.fchaos`)
	require.NoError(t, err)
	eventIDs := map[string]string{}
	var event, eventID string
	_, err = pgx.ForEachRow(rows, []any{&event, &eventID}, func() error { eventIDs[event] = eventID; return nil })
	require.NoError(t, err)

	peer.mu.Lock()
	defer peer.mu.Unlock()
	all.mu.Lock()
	defer all.mu.Unlock()
	var hookMissing, hookWrongID, allMissing, allWrongID, hookDeliveries, allDeliveries int64
	for event, eventID := range eventIDs {
		if peer.kept[eventID] == 0 {
			hookMissing++
		}
		if peer.identityOf[event] != eventID {
			hookWrongID++
		}
		if all.kept[eventID] == 0 {
			allMissing++
		}
		if all.identityOf[event] != eventID {
			allWrongID++
		}
	}
	for _, n := range peer.kept {
		hookDeliveries += int64(n)
	}
	for _, n := range all.kept {
		allDeliveries += int64(n)
	}
	fmt.Printf("relay fan-out chaos: events=%d replicas stopped=%d (killed %d) webhook calls=%d late answers=%d duplicates (by event_id): webhook %d, all %d\n",
		events, killed.Load(), abrupt.Load(), peer.calls.Load(), peer.late.Load(),
		hookDeliveries-int64(len(peer.kept)), allDeliveries-int64(len(all.kept)))

	require.EqualValues(t, events, len(eventIDs))
	require.EqualValues(t, events, source, "every event fanned out")
	require.EqualValues(t, events, hooks, "every event copied once into the webhook's queue")
	require.EqualValues(t, events, allRows, "every event copied once into the other sink's queue")
	require.EqualValues(t, 2, copiesPerEvent, "one copy of an event per sink")
	require.EqualValues(t, events, hooksSent)
	require.EqualValues(t, events, allSent)
	require.Zero(t, peer.badSigs.Load())
	require.Zero(t, hookMissing, "every event reached the webhook")
	require.Zero(t, allMissing, "every event reached the other sink")
	require.Zero(t, hookWrongID, "the webhook got each event under the source row's event_id")
	require.Zero(t, allWrongID, "the other sink got each event under the source row's event_id")
	require.Zero(t, peer.violated, "webhook: per key in commit order, one identity per event; the first: %v", peer.violations)
	require.Empty(t, all.violations, "other sink: per key in commit order, one identity per event")
	require.Positive(t, abrupt.Load(), "replicas were killed")
}
