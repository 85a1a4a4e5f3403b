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

// TestChaos_BothModesAtOnceWithOperatorsAndDBAs drains one partitioned queue with lease-mode and
// lock-mode replicas at the same time (each kind with and without runs), every replica a login role
// granted only pgdrain_worker, while an operator (pgdrain_operator) poisons, retries, releases,
// requeues and dismisses rows that are leased, locked in an open batch, backing off or poisoned, and
// the owner rewrites the table under them (VACUUM FULL, CLUSTER, REINDEX CONCURRENTLY, ALTER TABLE
// ADD COLUMN with a rewrite) and pgdrain's own tables (VACUUM FULL, REINDEX). The peer fails
// transiently, hangs past the lease now and then, and rejects the events written to be rejected.
//
// At the end (the operator requeues what it poisoned, the replicas drain in calm): every event is
// in the table once; each is sent, or poisoned because the peer rejects it, or dismissed by the
// operator; no lease is left; every sent event that nobody dismissed reached the peer; per key the
// peer's first deliveries came in id order; outbox.repair(dry run) finds nothing.
func TestChaos_BothModesAtOnceWithOperatorsAndDBAs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	const (
		keys      = 200
		rejectPct = 1
	)
	// Rounds of production 300 ms apart, and how long the chaos may last: short in make test (its
	// time budget), PGDRAIN_SOAK's length in make soak.
	rounds, window := 20, 20*time.Second
	if v := os.Getenv("PGDRAIN_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "PGDRAIN_SOAK")
		rounds, window = max(rounds, int(d/(300*time.Millisecond))), d+window
	}
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.chaos', 'resource_id', max_attempts => 10,
		backoff_min => '20 milliseconds', backoff_max => '200 milliseconds')`)
	require.NoError(t, err)

	peer := &mixedPeer{deliveries: map[string]int{}, lastFirst: map[string]int64{}}
	workerURL := loginURL(t, db, "pgdrain_worker")
	lease := &mixedRun{t: t, url: workerURL, mode: drainer.ClaimLease, peer: peer}
	lock := &mixedRun{t: t, url: workerURL, mode: drainer.ClaimLock, peer: peer}
	chaosCtx, stopChaos := context.WithCancel(ctx)
	var wg sync.WaitGroup

	// The producer retries a transaction the server chose as a deadlock's victim, as an application
	// must beside a DBA's DDL: the owner's REINDEX TABLE of pgdrain's heads below (the operator's
	// comment says how) deadlocks with a producer's commit step now and then (server logs of a CI
	// flake: every cycle was a REINDEX and one producer or operator call). Counted and logged; any
	// other error fails the test.
	var produced, producerDeadlocks atomic.Int64
	producing := make(chan struct{})
	wg.Go(func() {
		defer close(producing)
		for round := range rounds {
			for {
				tag, err := db.Pool.Exec(ctx, `INSERT INTO public.chaos (event_type, payload, resource_id)
					SELECT 'chaos', jsonb_build_object('round', $1::int, 'reject', random() * 100 < $3), 'key-' || g
					FROM generate_series(1, $2::int) g`, round, keys, rejectPct)
				if code, _ := sqlState(err); code == "40P01" {
					producerDeadlocks.Add(1)
					continue
				}
				if !assertNoErr(t, err, "producing") {
					return
				}
				produced.Add(tag.RowsAffected())
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
	})

	// Replicas: two of each mode, one of each taking runs; restarted at random, a third abruptly.
	runs := []*mixedRun{lease, lease, lock, lock}
	slots := make([]*chaosReplica, len(runs))
	var slotsMu sync.Mutex
	for i, run := range runs {
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
				run.stop(db, old, rand.IntN(3) == 0)
				slotsMu.Lock()
				slots[i] = run.start(i)
				slotsMu.Unlock()
			}
		})
	}

	// Operator: acts on whatever row it finds, in whatever state, fenced by what it saw. A call the
	// server chose as a deadlock's victim beside the owner's REINDEX TABLE of pgdrain's heads (which
	// locks the table, then the indexes one by one: a call that read the heads through an index not
	// yet rebuilt and then writes a head closes the cycle) changed nothing; it is counted, and the
	// operator acts again.
	operator := loginAs(t, db, "pgdrain_operator")
	var acts sync.Map
	var operatorDeadlocks atomic.Int64
	wg.Go(func() {
		for chaosCtx.Err() == nil {
			time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
			what, err := mixedOperatorAct(ctx, db.Pool, operator)
			if code, _ := sqlState(err); code == "40P01" {
				operatorDeadlocks.Add(1)
				continue
			}
			if err != nil {
				t.Errorf("operator %s: %v", what, err)
				return
			}
			n, _ := acts.LoadOrStore(what, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}
	})

	// Owner: rewrites the queue table and pgdrain's own tables under the drain.
	var dbaDone atomic.Int64
	dba := []string{
		`VACUUM FULL public.chaos`,
		`CLUSTER public.chaos USING chaos_pkey`,
		`REINDEX TABLE CONCURRENTLY public.chaos`,
		`ALTER TABLE public.chaos ADD COLUMN IF NOT EXISTS dba_note double precision DEFAULT random()`,
		`ALTER TABLE public.chaos DROP COLUMN IF EXISTS dba_note`,
		`VACUUM FULL outbox.partition_heads`,
		`REINDEX TABLE outbox.partition_heads`,
		`VACUUM (ANALYZE) public.chaos`,
	}
	wg.Go(func() {
		for chaosCtx.Err() == nil {
			time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Millisecond)
			stmt := dba[rand.IntN(len(dba))]
			c, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := db.Pool.Exec(c, stmt)
			cancel()
			if code, _ := sqlState(err); err != nil && code != "40P01" {
				t.Errorf("owner: %s: %v", stmt, err)
				return
			}
			dbaDone.Add(1)
		}
	})

	pending := func() int64 {
		var p int64
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM public.chaos WHERE sent_at IS NULL AND attempt_count < 10`).Scan(&p)
		return p
	}
	began := time.Now()
	<-producing
	for time.Since(began) < window && pending() > keys/10 {
		time.Sleep(200 * time.Millisecond)
	}
	stopChaos()
	wg.Wait()

	// Calm: what the operator poisoned goes back (to the tail of its key), and the replicas drain.
	limit := time.Now().Add(2 * time.Minute)
	for time.Now().Before(limit) {
		var poisonedByOperator int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM public.chaos
			WHERE sent_at IS NULL AND attempt_count >= 10 AND NOT (payload->>'reject')::boolean`).Scan(&poisonedByOperator))
		if poisonedByOperator > 0 {
			_, err := db.Pool.Exec(ctx, `SELECT outbox.requeue_poisoned('public.chaos', ARRAY(
				SELECT id FROM public.chaos WHERE sent_at IS NULL AND attempt_count >= 10 AND NOT (payload->>'reject')::boolean))`)
			require.NoError(t, err)
		}
		if poisonedByOperator == 0 && pending() == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i, r := range slots {
		runs[i].stop(db, r, false)
	}

	var events, distinct, sent, dismissed, poisoned, rejectedPoisoned, leased, unsettled int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*), count(DISTINCT event_id), count(*) FILTER (WHERE sent_at IS NOT NULL),
		       count(*) FILTER (WHERE sent_at IS NOT NULL AND last_error LIKE 'dismissed by %'),
		       count(*) FILTER (WHERE sent_at IS NULL AND attempt_count >= 10),
		       count(*) FILTER (WHERE sent_at IS NULL AND attempt_count >= 10 AND (payload->>'reject')::boolean),
		       count(*) FILTER (WHERE lease_token IS NOT NULL OR leased_until IS NOT NULL),
		       count(*) FILTER (WHERE sent_at IS NULL AND attempt_count < 10)
		FROM public.chaos`).Scan(&events, &distinct, &sent, &dismissed, &poisoned, &rejectedPoisoned, &leased, &unsettled))
	rows, err := db.Pool.Query(ctx, `SELECT event_id::text FROM public.chaos
		WHERE sent_at IS NOT NULL AND (last_error IS NULL OR last_error NOT LIKE 'dismissed by %')`)
	require.NoError(t, err)
	sentIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	rows, err = db.Pool.Query(ctx, `SELECT partition_key || ': ' || cause || ' ' || detail FROM outbox.repair('public.chaos', true)`)
	require.NoError(t, err)
	repairs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)

	peer.mu.Lock()
	defer peer.mu.Unlock()
	undelivered := 0
	for _, id := range sentIDs {
		if peer.deliveries[id] == 0 {
			undelivered++
		}
	}
	opCounts := map[string]int64{}
	acts.Range(func(k, v any) bool { opCounts[k.(string)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("both modes: events=%d sent=%d dismissed=%d poisoned=%d (rejected %d) peer calls=%d hangs=%d order violations=%d; operator: %v; owner statements=%d; replicas stopped=%d; deadlocks retried: producer %d, operator %d",
		events, sent, dismissed, poisoned, rejectedPoisoned, peer.calls.Load(), peer.hangs.Load(), peer.violations, opCounts, dbaDone.Load(),
		lease.stopped.Load()+lock.stopped.Load(), producerDeadlocks.Load(), operatorDeadlocks.Load())

	require.Equal(t, produced.Load(), events, "every produced event is in the table")
	require.Equal(t, events, distinct, "each event once")
	require.Zero(t, unsettled, "nothing is left pending")
	require.Equal(t, poisoned, rejectedPoisoned, "only events the peer rejects stay poisoned")
	require.Equal(t, events, sent+poisoned, "every event is sent (or dismissed) or poisoned")
	require.Zero(t, leased, "no row is left leased")
	require.Zero(t, undelivered, "every sent event that nobody dismissed reached the peer")
	require.Zero(t, peer.violations, "per key, first deliveries in id order: %v", peer.examples)
	require.Empty(t, repairs, "outbox.repair finds nothing to repair")
}

// mixedPeer records what it accepted, by event_id (a requeued row has a new id).
type mixedPeer struct {
	mu         sync.Mutex
	deliveries map[string]int   // event_id -> times accepted
	lastFirst  map[string]int64 // key -> id of the latest first delivery
	violations int
	examples   []string
	calls      atomic.Int64
	hangs      atomic.Int64
}

func (p *mixedPeer) apply(ctx context.Context, _ string, payload json.RawMessage) error {
	p.calls.Add(1)
	ev, ok := drainer.EventFrom(ctx)
	if !ok {
		return drainer.Permanent(errors.New("no event in ctx"))
	}
	var body struct {
		Reject bool `json:"reject"`
	}
	if err := json.Unmarshal(payload, &body); err != nil {
		return drainer.Permanent(err)
	}
	if body.Reject {
		return drainer.Permanent(fmt.Errorf("peer rejects event %d", ev.ID))
	}
	r := rand.Float64()
	switch {
	case r < chaosTransient:
		return errors.New("peer: 503 service unavailable")
	case r < chaosTransient+chaosHang:
		p.accept(ev)
		p.hangs.Add(1)
		time.Sleep(chaosHangFor)
		return nil
	}
	p.accept(ev)
	return nil
}

func (p *mixedPeer) accept(ev drainer.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := ev.EventID
	p.deliveries[id]++
	if p.deliveries[id] > 1 {
		return
	}
	if last, ok := p.lastFirst[ev.PartitionKey]; ok && last > ev.ID {
		p.violations++
		if len(p.examples) < 10 {
			p.examples = append(p.examples, fmt.Sprintf("key %s: id %d after %d", ev.PartitionKey, ev.ID, last))
		}
	}
	p.lastFirst[ev.PartitionKey] = ev.ID
}

// mixedRun starts and stops the replicas of one claim mode.
type mixedRun struct {
	t       *testing.T
	url     string
	mode    drainer.ClaimMode
	peer    *mixedPeer
	gen     atomic.Int64
	stopped atomic.Int64
}

func (c *mixedRun) start(slot int) *chaosReplica {
	gen := c.gen.Add(1)
	cfg, err := pgxpool.ParseConfig(c.url)
	require.NoError(c.t, err)
	name := fmt.Sprintf("mixed-%s-r%d-%d", c.mode, slot, gen)
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
		ApplyConcurrency: 16,
		PollFallback:     200 * time.Millisecond,
		RunLength:        1 + 7*(slot%2),
	}, func(b []byte) (json.RawMessage, error) { return b, nil }, c.peer.apply,
		drainer.WithLogger[json.RawMessage](slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(c.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &chaosReplica{pool: pool, cancel: cancel, done: make(chan struct{}), dead: dead, name: name}
	go func() {
		defer close(r.done)
		_ = d.Run(ctx)
	}()
	return r
}

func (c *mixedRun) stop(db *testdb.DB, r *chaosReplica, abrupt bool) {
	c.stopped.Add(1)
	if abrupt {
		r.dead.Store(true)
		_, _ = db.Pool.Exec(context.Background(),
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, r.name)
	}
	r.cancel()
	<-r.done
	r.pool.Close()
}

// mixedOperatorAct picks a row as an operator's page would show it and acts on it: poison or retry
// a pending row with the attempt count seen, end a lease (fenced by the lease end seen, or not),
// requeue or dismiss poisoned rows. Rows the peer rejects are never dismissed or requeued here, so
// the end state is known; the others are requeued at the end.
func mixedOperatorAct(ctx context.Context, owner *pgxpool.Pool, op *pgx.Conn) (string, error) {
	var id int64
	var attempts int
	var leasedUntil *time.Time
	var reject bool
	err := owner.QueryRow(ctx, `SELECT id, attempt_count, leased_until, (payload->>'reject')::boolean FROM public.chaos
		WHERE sent_at IS NULL AND CASE $1::int WHEN 0 THEN leased_until > clock_timestamp()
		                                       WHEN 1 THEN next_attempt_at > clock_timestamp()
		                                       WHEN 2 THEN attempt_count >= 10 ELSE true END
		ORDER BY random() LIMIT 1`, rand.IntN(4)).Scan(&id, &attempts, &leasedUntil, &reject)
	if errors.Is(err, pgx.ErrNoRows) {
		return "none", nil
	}
	if err != nil {
		return "pick", err
	}
	var what, q string
	args := []any{id, attempts}
	switch x := rand.IntN(100); {
	case x < 30:
		what, q = "poison_row", `SELECT outbox.poison_row('public.chaos', $1, $2, 'operator test')::text`
	case x < 55:
		what, q = "retry_row", `SELECT outbox.retry_row('public.chaos', $1, $2)::text`
	case x < 70:
		what, q, args = "release_lease(seen)", `SELECT outbox.release_lease('public.chaos', $1, $2)::text`, []any{id, leasedUntil}
	case x < 75:
		what, q, args = "release_lease", `SELECT outbox.release_lease('public.chaos', $1)::text`, []any{id}
	case x < 95:
		var ids []int64
		rows, err := owner.Query(ctx, `SELECT id FROM public.chaos
			WHERE sent_at IS NULL AND attempt_count >= 10 AND NOT (payload->>'reject')::boolean ORDER BY random() LIMIT 3`)
		if err == nil {
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err != nil {
			return "pick poisoned", err
		}
		if len(ids) == 0 {
			return "none", nil
		}
		what, q, args = "requeue_poisoned", `SELECT outbox.requeue_poisoned('public.chaos', $1::bigint[])::text`, []any{ids}
	default:
		if reject {
			what, q, args = "dismiss_poisoned", `SELECT outbox.dismiss_poisoned('public.chaos', ARRAY[$1::bigint], 'operator test')::text`, []any{id}
		} else {
			return "none", nil
		}
	}
	if leasedUntil == nil && what == "release_lease(seen)" {
		return "none", nil
	}
	var res string
	if err := op.QueryRow(ctx, q, args...).Scan(&res); err != nil {
		return what, err
	}
	return what + "=" + res, nil
}
