package gocheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
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
)

// The chaos drain's knobs. The peer fails 20% of calls transiently, accepts 1% and then hangs past
// the lease before answering, and rejects every event whose id is a multiple of chaosRejectEvery.
const (
	chaosReplicas     = 4
	chaosKeys         = 1000
	chaosRounds       = 20 // one event per key per round: 20,000 events in make test
	chaosTransient    = 0.20
	chaosHang         = 0.01
	chaosRejectEvery  = 997
	chaosApplyTimeout = 100 * time.Millisecond
	chaosLease        = chaosApplyTimeout + drainer.LeaseMargin + 100*time.Millisecond
	chaosHangFor      = chaosLease + 100*time.Millisecond
	// chaosConcurrency is both the claim size and the applies in flight per replica: a hang stalls
	// its whole wave, so waves are wide to keep the test near a minute.
	chaosConcurrency = 200
	// chaosWindow bounds the chaos in make test (PGDRAIN_SOAK adds to it); the replicas then drain
	// what is left undisturbed, the peer still flaky.
	chaosWindow = 20 * time.Second
	// chaosRacers producers race each other (see chaosRace), each writing chaosRaceKeys of
	// chaosRaceKeySpace keys of their own per transaction: keys without a backlog, delivered as soon
	// as they commit, so a late commit would show as a smaller id after a larger one.
	chaosRacers       = 3
	chaosRaceKeys     = 4
	chaosRaceKeySpace = 8
)

// TestChaos drains one partitioned queue with four drainer replicas while everything around them
// breaks: a flaky, hanging, rejecting peer; replicas cancelled and restarted at random (some
// gracefully, some abruptly: connections cut and no new ones, like a killed process); drainer
// connections killed with pg_terminate_backend. Lease mode, then lock mode, on one database (the
// queue table dropped behind pgdrain's back and registered again in between). With
// PGDRAIN_SOAK=10m (make soak) producers keep going for that long. Half the replicas claim runs
// (RunLength 8: a key's next rows with its head, applied in order in one slot), half one row per
// key, on the same queue.
//
// Racing producers write keys of their own in short transactions that commit out of id order, so
// the per-key order check also covers concurrent producers (late rows renumbered at their commit).
//
// At the end: every event is sent or poisoned (exactly the rejected ones), none is leased, every
// sent event reached the peer, per key the peer's first deliveries came in id order, and no result
// was recorded under a stale token (an audit trigger on the queue table sees every write).
func TestChaos(t *testing.T) {
	soak := time.Duration(0)
	if v := os.Getenv("PGDRAIN_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "PGDRAIN_SOAK")
		soak = d
	}
	// Both modes one after the other against the same database: the second run starts on the
	// derived state (heads, clocks, dead versions) the first one left, with the queue dropped and
	// made again in between, as users reset queues.
	db := testdb.New(t)
	for _, mode := range []drainer.ClaimMode{drainer.ClaimLease, drainer.ClaimLock} {
		t.Run(mode.String(), func(t *testing.T) {
			runChaos(t, db, mode, soak)
		})
	}
}

// chaosPeer is the remote side: it records what it accepted.
type chaosPeer struct {
	mu         sync.Mutex
	deliveries map[int64]int    // id -> times accepted
	lastFirst  map[string]int64 // key -> id of the latest first delivery
	violations int
	calls      atomic.Int64
	hangs      atomic.Int64
}

func (p *chaosPeer) apply(ctx context.Context, _ string, _ json.RawMessage) error {
	p.calls.Add(1)
	ev, ok := drainer.EventFrom(ctx)
	if !ok {
		return drainer.Permanent(errors.New("no event in ctx"))
	}
	if ev.ID%chaosRejectEvery == 0 {
		return drainer.Permanent(fmt.Errorf("peer rejects event %d", ev.ID))
	}
	r := rand.Float64()
	switch {
	case r < chaosTransient:
		return errors.New("peer: 503 service unavailable")
	case r < chaosTransient+chaosHang:
		// Accepted, but the answer comes back after the lease has ended (ctx ignored).
		p.accept(ev)
		p.hangs.Add(1)
		time.Sleep(chaosHangFor)
		return nil
	}
	p.accept(ev)
	return nil
}

func (p *chaosPeer) accept(ev drainer.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deliveries[ev.ID]++
	if p.deliveries[ev.ID] > 1 {
		return
	}
	if last, ok := p.lastFirst[ev.PartitionKey]; ok && last > ev.ID {
		p.violations++
	}
	p.lastFirst[ev.PartitionKey] = ev.ID
}

// chaosReplica is one drainer process: its own pool, stopped gracefully or abruptly.
type chaosReplica struct {
	pool   *pgxpool.Pool
	cancel context.CancelFunc
	done   chan struct{}
	dead   *atomic.Bool
	name   string
}

type chaosRun struct {
	t        *testing.T
	db       *testdb.DB
	mode     drainer.ClaimMode
	peer     *chaosPeer
	started  atomic.Int64
	killed   atomic.Int64
	abrupt   atomic.Int64
	termed   atomic.Int64
	produced atomic.Int64
	chaosFor time.Duration
	calmFor  time.Duration
}

func runChaos(t *testing.T, db *testdb.DB, mode drainer.ClaimMode, soak time.Duration) {
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
		DROP TABLE IF EXISTS public.chaos;
		DROP TABLE IF EXISTS public.chaos_audit;
		DROP FUNCTION IF EXISTS public.chaos_audit();
		SELECT outbox.create_queue('public.chaos', 'resource_id', max_attempts => 10,
		                           backoff_min => '20 milliseconds', backoff_max => '200 milliseconds');
		%s`, chaosAuditSQL("public.chaos")))
	require.NoError(t, err)

	run := &chaosRun{t: t, db: db, mode: mode,
		peer: &chaosPeer{deliveries: map[int64]int{}, lastFirst: map[string]int64{}}}
	chaosCtx, stopChaos := context.WithCancel(ctx)
	var wg sync.WaitGroup

	// Soak: producers keep the backlog bounded so the run ends drained.
	boundBacklog := func() {
		for soak > 0 && chaosCtx.Err() == nil {
			var pending int64
			if db.Pool.QueryRow(ctx, `SELECT pending FROM outbox.stats('public.chaos')`).Scan(&pending) == nil && pending < 5*chaosKeys {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Producer: one event per key per round, in one INSERT per round, committed in id order.
	producing := make(chan struct{})
	wg.Go(func() {
		defer close(producing)
		deadline := time.Now().Add(soak)
		for round := 0; round < chaosRounds || time.Now().Before(deadline); round++ {
			boundBacklog()
			tag, err := db.Pool.Exec(ctx, `INSERT INTO public.chaos (event_type, payload, resource_id)
				SELECT 'chaos', jsonb_build_object('round', $1::int), 'key-' || g FROM generate_series(1, $2::int) g`,
				round, chaosKeys)
			if !assertNoErr(t, err, "producing") {
				return
			}
			run.produced.Add(tag.RowsAffected())
			time.Sleep(250 * time.Millisecond)
		}
	})

	// Racing producers: short transactions writing a few random keys in random order, pausing before
	// COMMIT, so their commits come in another order than their ids: per-key order then rests on the
	// commit step renumbering late rows, and opposite key orders must not deadlock.
	for range chaosRacers {
		wg.Go(func() {
			for {
				select {
				case <-producing:
					return
				default:
				}
				boundBacklog()
				n, err := chaosRace(ctx, db.Pool)
				if !assertNoErr(t, err, "racing producer") {
					return
				}
				run.produced.Add(n)
			}
		})
	}

	// Replicas: each slot runs a drainer for a random while, stops it (a third abruptly), starts anew.
	slots := make([]*chaosReplica, chaosReplicas)
	var slotsMu sync.Mutex
	for i := range chaosReplicas {
		slots[i] = run.start(i)
		wg.Go(func() {
			for {
				select {
				case <-chaosCtx.Done():
					return
				case <-time.After(time.Duration(1000+rand.IntN(3000)) * time.Millisecond):
				}
				slotsMu.Lock()
				old := slots[i]
				slotsMu.Unlock()
				run.stop(old, rand.IntN(4) == 0)
				slotsMu.Lock()
				slots[i] = run.start(i)
				slotsMu.Unlock()
			}
		})
	}

	// Killer: pg_terminate_backend on a random drainer connection (pooled or LISTEN).
	wg.Go(func() {
		for {
			select {
			case <-chaosCtx.Done():
				return
			case <-time.After(time.Duration(300+rand.IntN(500)) * time.Millisecond):
			}
			var n int64
			err := db.Pool.QueryRow(ctx, `
				SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM (
				  SELECT pid FROM pg_stat_activity
				  WHERE datname = current_database() AND pid <> pg_backend_pid()
				    AND (application_name LIKE 'chaos-%' OR application_name LIKE 'pgdrain listen %')
				  ORDER BY random() LIMIT 1) s`).Scan(&n)
			if err == nil {
				run.termed.Add(n)
			}
		}
	})

	// Chaos lasts while producing and until the backlog is nearly drained, then the replicas run
	// undisturbed (the peer still flaky) until everything is settled.
	total := func() (settled, pending int64) {
		var s, p int64
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE sent_at IS NOT NULL OR attempt_count >= 10),
			count(*) FILTER (WHERE sent_at IS NULL AND attempt_count < 10) FROM public.chaos`).Scan(&s, &p)
		return s, p
	}
	began := time.Now()
	<-producing
	chaosUntil := began.Add(chaosWindow + soak)
	for time.Now().Before(chaosUntil) {
		if _, pending := total(); pending < chaosKeys/10 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopChaos()
	wg.Wait()
	run.chaosFor = time.Since(began)
	limit := time.Now().Add(3 * time.Minute)
	for time.Now().Before(limit) {
		if _, pending := total(); pending == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, r := range slots {
		run.stop(r, false)
	}
	run.calmFor = time.Since(began) - run.chaosFor
	run.verify()
}

// chaosRace is one racing producer transaction: chaosRaceKeys random race keys, one INSERT each, a
// pause, COMMIT. It returns the rows it committed.
func chaosRace(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for range chaosRaceKeys {
			if _, err := tx.Exec(ctx, `INSERT INTO public.chaos (event_type, payload, resource_id)
				VALUES ('race', '{}', 'race-' || $1::int)`, rand.IntN(chaosRaceKeySpace)); err != nil {
				return err
			}
		}
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return chaosRaceKeys, nil
}

func assertNoErr(t *testing.T, err error, what string) bool {
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return false
	}
	return true
}

func (c *chaosRun) start(slot int) *chaosReplica {
	gen := c.started.Add(1)
	cfg, err := pgxpool.ParseConfig(c.db.URL)
	require.NoError(c.t, err)
	name := fmt.Sprintf("chaos-%s-r%d-%d", c.mode, slot, gen)
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	cfg.MaxConns = 4
	dead := &atomic.Bool{}
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if dead.Load() {
			return errors.New("replica is dead")
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(c.t, err)
	d, err := drainer.New(pool, drainer.Config{
		Table:            "public.chaos",
		ClaimMode:        c.mode,
		ApplyTimeout:     chaosApplyTimeout,
		Lease:            chaosLease,
		ApplyConcurrency: chaosConcurrency,
		PollFallback:     200 * time.Millisecond,
		// Odd slots take runs (claim_runs / claim_locked_runs), even ones the seed's claim: both
		// kinds of replica share the queue, and a run dies with its replica like any claim.
		RunLength: 1 + 7*(slot%2),
	}, func(b []byte) (json.RawMessage, error) { return b, nil }, c.peer.apply,
		drainer.WithLogger[json.RawMessage](slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(c.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &chaosReplica{pool: pool, cancel: cancel, done: make(chan struct{}), dead: dead, name: name}
	go func() {
		defer close(r.done)
		// Run fails only at start (a connection killed during the registration check): that
		// replica is simply down until its slot restarts it, like a crash-looping process.
		_ = d.Run(ctx)
	}()
	return r
}

// stop cancels a replica. Abruptly: first no new connections and every existing one terminated,
// so nothing it still has in flight can be recorded, as if the process had been killed.
func (c *chaosRun) stop(r *chaosReplica, abrupt bool) {
	c.killed.Add(1)
	if abrupt {
		c.abrupt.Add(1)
		r.dead.Store(true)
		_, _ = c.db.Pool.Exec(context.Background(),
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, r.name)
	}
	r.cancel()
	<-r.done
	r.pool.Close()
}

func (c *chaosRun) verify() {
	t := c.t
	ctx := context.Background()
	var events, sent, poisoned, leased, wrongPoison, sentUndelivered int64
	require.NoError(t, c.db.Pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE sent_at IS NOT NULL),
		       count(*) FILTER (WHERE sent_at IS NULL AND attempt_count >= 10),
		       count(*) FILTER (WHERE lease_token IS NOT NULL OR leased_until IS NOT NULL),
		       count(*) FILTER (WHERE (sent_at IS NULL) <> (id % $1 = 0))
		FROM public.chaos`, chaosRejectEvery).Scan(&events, &sent, &poisoned, &leased, &wrongPoison))
	stale, doubleSent := chaosAuditFindings(t, c.db.Pool, "public.chaos", c.mode == drainer.ClaimLease)
	rows, err := c.db.Pool.Query(ctx, `SELECT id FROM public.chaos WHERE sent_at IS NOT NULL`)
	require.NoError(t, err)
	sentIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)

	c.peer.mu.Lock()
	defer c.peer.mu.Unlock()
	var deliveries int64
	for _, n := range c.peer.deliveries {
		deliveries += int64(n)
	}
	for _, id := range sentIDs {
		if c.peer.deliveries[id] == 0 {
			sentUndelivered++
		}
	}
	duplicates := deliveries - int64(len(c.peer.deliveries))

	t.Logf("chaos %s: %s of chaos, %s calm; replicas killed abruptly=%d; peer calls=%d, hangs past the lease=%d",
		c.mode, c.chaosFor.Round(time.Second), c.calmFor.Round(time.Second), c.abrupt.Load(), c.peer.calls.Load(), c.peer.hangs.Load())
	fmt.Printf("chaos %s: events=%d replicas killed=%d connections terminated=%d sent=%d poisoned=%d duplicates=%d order violations=%d stale records=%d\n",
		c.mode, events, c.killed.Load(), c.termed.Load(), sent, poisoned, duplicates, c.peer.violations, stale)

	require.Equal(t, c.produced.Load(), events, "every produced event is in the table")
	require.GreaterOrEqual(t, events, int64(chaosRounds*chaosKeys))
	require.Equal(t, events, sent+poisoned, "every event is sent or poisoned: none lost, none stuck")
	require.Zero(t, wrongPoison, "exactly the rejected events are poisoned")
	require.Zero(t, leased, "no row is left leased")
	require.Zero(t, sentUndelivered, "every sent event reached the peer")
	require.Zero(t, c.peer.violations, "per key, first deliveries in id order")
	require.Zero(t, stale, "no result recorded under a stale token")
	require.Zero(t, doubleSent, "no row was marked sent twice")
	require.Positive(t, c.termed.Load(), "connections were terminated")
	require.Positive(t, c.abrupt.Load(), "replicas were killed abruptly")
}

// chaosAuditSQL installs, on queue table, a trigger that logs every write to a row in
// public.chaos_audit, in order: claims (a new lease token) and results (sent, or an attempt).
func chaosAuditSQL(table string) string {
	return fmt.Sprintf(`
		CREATE TABLE public.chaos_audit (seq bigserial PRIMARY KEY, id bigint NOT NULL, kind text NOT NULL,
		                                 old_token uuid, new_token uuid, live_lease boolean);
		CREATE FUNCTION public.chaos_audit() RETURNS trigger LANGUAGE plpgsql SET search_path = '' AS $$
		BEGIN
		  IF OLD.sent_at IS NULL AND (NEW.sent_at IS NOT NULL OR NEW.attempt_count <> OLD.attempt_count
		                              OR NEW.next_attempt_at IS DISTINCT FROM OLD.next_attempt_at) THEN
		    INSERT INTO public.chaos_audit (id, kind, old_token, live_lease)
		    VALUES (OLD.id, CASE WHEN NEW.sent_at IS NOT NULL THEN 'sent' ELSE 'failed' END, OLD.lease_token,
		            OLD.leased_until > pg_catalog.clock_timestamp());
		  ELSIF NEW.lease_token IS NOT NULL AND NEW.lease_token IS DISTINCT FROM OLD.lease_token THEN
		    INSERT INTO public.chaos_audit (id, kind, old_token, new_token) VALUES (OLD.id, 'claim', OLD.lease_token, NEW.lease_token);
		  END IF;
		  RETURN NEW;
		END $$;
		CREATE TRIGGER chaos_audit BEFORE UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION public.chaos_audit();`, table)
}

// chaosAuditFindings counts stale records and rows marked sent twice in the audit log. Stale, lease
// mode: a result written with a token other than the one the row's latest claim issued, or with a
// token that had already recorded a result. Lock mode has no tokens (the row lock is the fence):
// stale is a result written over a live lease, which only a lease-mode claimer could hold.
func chaosAuditFindings(t *testing.T, pool *pgxpool.Pool, table string, leaseMode bool) (stale, doubleSent int64) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(), `
		WITH r AS (
		  SELECT a.*, (SELECT c.new_token FROM public.chaos_audit c
		               WHERE c.id = a.id AND c.kind = 'claim' AND c.seq < a.seq ORDER BY c.seq DESC LIMIT 1) AS issued,
		         count(*) OVER (PARTITION BY a.id, a.old_token) AS uses
		  FROM public.chaos_audit a WHERE a.kind <> 'claim')
		SELECT count(*) FILTER (WHERE CASE WHEN $1 THEN old_token IS DISTINCT FROM issued OR uses > 1
		                                   ELSE old_token IS NOT NULL AND live_lease END),
		       (SELECT count(*) FROM (SELECT id FROM public.chaos_audit WHERE kind = 'sent' GROUP BY id HAVING count(*) > 1) d)
		FROM r`, leaseMode).Scan(&stale, &doubleSent))
	return stale, doubleSent
}
