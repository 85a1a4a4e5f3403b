package gocheck

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
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
)

// The failover check's queues: one per claim mode, drained through the multi-host DSN, and one
// drained only by a drainer that connects to the standby before it is promoted.
const (
	foLease = "public.fo_lease"
	foLock  = "public.fo_lock"
	foEarly = "public.fo_early"
)

var foQueues = []string{foLease, foLock, foEarly}

// TestFailover_PromoteStandbyMidDrain runs a primary and a synchronous streaming standby made
// with pg_basebackup. Producers (pgdrain_producer) insert into three partitioned queues while Go
// drainers (pgdrain_worker) drain them: lease mode and lock mode through a pool whose DSN names
// both hosts with target_session_attrs=read-write, and one lease-mode drainer whose pool points at
// the standby alone and so gets nothing but errors until the promotion. Mid-drain the primary
// stops (fast shutdown: 57P01 to every client) and the standby is promoted. Then: the drainers
// reconnect by themselves and drain everything; every commit the producers saw acknowledged is on
// the new primary and reached the peer; per key the peer saw ids in order (a repeat of the same
// id is a retry); the partition heads were rebuilt on the new primary (they are unlogged) and
// outbox.repair finds nothing to repair, during the recovery and after; and the drainer on the
// standby retried with backoff rather than in a tight loop, and never stopped; a drainer started
// while there is no primary waits for one; every error logged was known as the database being
// unavailable (Warn, not Error); every LISTEN connection is back on the new primary.
func TestFailover_PromoteStandbyMidDrain(t *testing.T) {
	t.Parallel()
	started := time.Now()
	ctx := context.Background()
	primary := startOwnCluster(t, primarySettings...)
	admin, err := pgx.Connect(ctx, primary.postgresURL)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `CREATE DATABASE failover`)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	primaryURL := testdb.WithDatabase(primary.postgresURL, "failover")
	require.NoError(t, testdb.MigrateUp(ctx, primaryURL))
	setup, err := pgxpool.New(ctx, primaryURL)
	require.NoError(t, err)
	for _, q := range foQueues {
		_, err = setup.Exec(ctx, `SELECT outbox.create_queue($1, 'resource_id',
			backoff_min => '50 milliseconds', backoff_max => '200 milliseconds')`, q)
		require.NoError(t, err)
	}
	// Login roles, made on the primary before the base backup (the standby has them too).
	db := &testdb.DB{Name: "failover", URL: primaryURL, Pool: setup}
	loginUser := func(role string) string {
		u, err := url.Parse(loginURL(t, db, role))
		require.NoError(t, err)
		return u.User.Username()
	}
	producerUser, workerUser, operatorUser := loginUser("pgdrain_producer"), loginUser("pgdrain_worker"),
		loginUser("pgdrain_operator")

	standby := startStandby(t, primary)
	makeSynchronous(t, primary)
	setup.Close()
	both := func(user string) string { return multiHostDSN(user, "failover", primary, standby) }
	newPool := func(dsn string) *pgxpool.Pool {
		p, err := pgxpool.New(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	superuser := newPool(both("postgres"))
	operator := newPool(both(operatorUser))

	peer := newFoPeer()
	apply := func(ctx context.Context, _ string, e drEvent) error {
		ev, _ := drainer.EventFrom(ctx)
		peer.apply(ctx, ev, e)
		time.Sleep(time.Millisecond)
		return nil
	}

	// Drainers: two per mode, each with its own pool (its own process, as far as PostgreSQL can
	// tell), and the one on the standby.
	tally, earlyTally := newFoTally(), newFoTally()
	runCtx, stopDrainers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var returnedEarly atomic.Int64
	runErrs := make(chan error, 8) // every drainer started below
	var pools []*pgxpool.Pool
	start := func(queue string, mode drainer.ClaimMode, dsn string, h slog.Handler) {
		// PollFallback is long: events written after the failover are drained within seconds only
		// if the LISTEN connections came back.
		cfg := drainer.Config{Table: queue, ClaimMode: mode, BatchSize: 16, ApplyConcurrency: 4,
			ApplyTimeout: 500 * time.Millisecond, PollFallback: time.Minute}
		if mode == drainer.ClaimLease {
			cfg.Lease = 3 * time.Second // in-flight leases the failover orphans end soon
		}
		pool := newPool(dsn)
		pools = append(pools, pool)
		d, err := drainer.New(pool, cfg, drDecode, apply, drainer.WithLogger[drEvent](slog.New(h)))
		require.NoError(t, err)
		wg.Go(func() {
			err := d.Run(runCtx)
			if runCtx.Err() == nil {
				returnedEarly.Add(1)
			}
			runErrs <- err
		})
	}
	for range 2 {
		start(foLease, drainer.ClaimLease, both(workerUser), tally)
		start(foLock, drainer.ClaimLock, both(workerUser), tally)
	}
	standbyDSN := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=failover sslmode=disable", standby.port, workerUser)
	earlyStart := time.Now()
	start(foEarly, drainer.ClaimLease, standbyDSN, earlyTally)
	defer func() { stopDrainers(); wg.Wait() }()

	// Producers: each owns its keys, so per key its commit order is its seq order. A commit counts
	// as acknowledged only when enqueue returned without error.
	prodCtx, stopProducers := context.WithCancel(ctx)
	producers := newPool(both(producerUser))
	var (
		ackMu      sync.Mutex
		acked      = map[string][]drEvent{}
		prodErrs   atomic.Int64
		prodWG     sync.WaitGroup
		ackedCount atomic.Int64
	)
	for p := range 4 {
		prodWG.Go(func() {
			seq := map[string]int{}
			backoff := 20 * time.Millisecond
			for i := 0; prodCtx.Err() == nil; i++ {
				queue := foQueues[i%len(foQueues)]
				key := fmt.Sprintf("p%d-k%d", p, rand.IntN(8))
				seq[queue+key]++
				e := drEvent{Key: key, Op: "e", Seq: seq[queue+key]}
				payload, _ := json.Marshal(e)
				cctx, cancel := context.WithTimeout(prodCtx, 5*time.Second)
				_, err := producers.Exec(cctx, `SELECT outbox.enqueue($1, 'e', $2::jsonb, $3)`, queue, string(payload), key)
				cancel()
				if err != nil {
					prodErrs.Add(1)
					time.Sleep(backoff)
					backoff = min(2*backoff, 500*time.Millisecond)
					continue
				}
				backoff = 20 * time.Millisecond
				ackMu.Lock()
				acked[queue] = append(acked[queue], e)
				ackMu.Unlock()
				ackedCount.Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	defer func() { stopProducers(); prodWG.Wait() }()

	// Mid-drain: both modes have delivered a good part of what was produced, the drainer on the
	// standby has been failing all along.
	require.Eventually(t, func() bool {
		return peer.figures(foLease).delivered >= 300 && peer.figures(foLock).delivered >= 300
	}, 2*time.Minute, 50*time.Millisecond, "the drainers deliver before the failover")
	require.Zero(t, returnedEarly.Load(), "no drainer's Run returned before the failover")
	require.Zero(t, peer.figures(foEarly).delivered, "nothing is delivered from a standby")
	earlyFailures := earlyTally.count("claiming batch failed")
	earlyWindow := time.Since(earlyStart)
	ackedBefore := ackedCount.Load()

	stopAt := time.Now()
	require.NoError(t, primary.pgCtl("stop", "-m", "fast"))
	stopTook := time.Since(stopAt)
	// No primary at all for a while: connections are refused or read-only. A drainer that starts
	// now waits for a primary instead of failing.
	start(foLease, drainer.ClaimLease, both(workerUser), tally)
	time.Sleep(time.Second)
	require.Eventually(t, func() bool { return tally.count("starting failed; retrying (database unavailable)") > 0 },
		30*time.Second, 10*time.Millisecond, "the drainer started with no primary waits for one")
	promoteAt := time.Now()
	peer.markPromoted(promoteAt)
	require.NoError(t, standby.promote())

	// While the new primary drains the backlog (producers still writing), the repair check in dry
	// run finds nothing: the heads the first claims rebuilt from the queue tables are right.
	repairCtx, stopRepairs := context.WithCancel(ctx)
	var repairs []string
	var repairChecks atomic.Int64
	repairDone := make(chan struct{})
	go func() {
		defer close(repairDone)
		for repairCtx.Err() == nil {
			for _, q := range foQueues {
				rows, err := operator.Query(repairCtx, `SELECT partition_key, cause, head_id, detail FROM outbox.repair($1, true)`, q)
				if err != nil {
					continue
				}
				found, err := pgx.CollectRows(rows, pgx.RowToMap)
				if err == nil {
					repairChecks.Add(1)
					for _, f := range found {
						repairs = append(repairs, fmt.Sprintf("%s: %v", q, f))
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	time.Sleep(3 * time.Second)
	stopProducers()
	prodWG.Wait()
	unsent := func() int64 {
		var n int64
		for _, q := range foQueues {
			var c int64
			if err := superuser.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE sent_at IS NULL`, q)).Scan(&c); err != nil {
				return -1
			}
			n += c
		}
		return n
	}
	require.Eventually(t, func() bool { return unsent() == 0 }, 2*time.Minute, 100*time.Millisecond,
		"the drainers drain every queue on the new primary")
	drainedAt := time.Now()

	// Every pool's LISTEN connection is back, on the new primary, and wakes its drainers: events
	// of new keys are delivered long before PollFallback.
	for i, pool := range pools {
		require.Eventually(t, func() bool {
			pid := drainer.ListenerPID(pool)
			var n int
			_ = superuser.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query LIKE 'LISTEN%'`,
				int64(pid)).Scan(&n)
			return pid != 0 && n == 1
		}, 30*time.Second, 50*time.Millisecond, "pool %d LISTENs on the new primary", i)
	}
	before := map[string]int{}
	for _, q := range foQueues {
		before[q] = peer.figures(q).delivered
		_, err := superuser.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
			SELECT 'after', jsonb_build_object('key', 'after-' || k, 'seq', 1), 'after-' || k FROM generate_series(1, 5) k`, q))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		for _, q := range foQueues {
			if peer.figures(q).delivered < before[q]+5 {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "events written after the failover are drained on NOTIFY, not the 1-minute poll")
	stopRepairs()
	<-repairDone
	stopDrainers()
	wg.Wait()
	close(runErrs)
	for err := range runErrs {
		require.NoError(t, err, "Run returns nil when cancelled")
	}
	require.Zero(t, returnedEarly.Load(), "no drainer's Run returned before it was cancelled")

	var built int
	require.NoError(t, superuser.QueryRow(ctx, `SELECT count(*) FROM outbox.partition_heads_built`).Scan(&built))
	require.Equal(t, len(foQueues), built, "the first claims on the new primary rebuilt the (unlogged) partition heads")
	for _, q := range foQueues {
		rows, err := operator.Query(ctx, `SELECT partition_key, cause, head_id, detail FROM outbox.repair($1, true)`, q)
		require.NoError(t, err)
		found, err := pgx.CollectRows(rows, pgx.RowToMap)
		require.NoError(t, err)
		for _, f := range found {
			repairs = append(repairs, fmt.Sprintf("%s (drained): %v", q, f))
		}
	}

	// Every acknowledged commit is on the new primary and was delivered; every row there reached
	// the peer; per key, ids in order.
	var lines []string
	for _, q := range foQueues {
		rows, err := superuser.Query(ctx, fmt.Sprintf(`SELECT id, payload->>'key', (payload->>'seq')::int FROM %s`, q))
		require.NoError(t, err)
		type row struct {
			id  int64
			key string
			seq int
		}
		stored, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.id, &x.key, &x.seq)
		})
		require.NoError(t, err)
		have := map[string]bool{}
		undelivered := 0
		for _, r := range stored {
			have[fmt.Sprint(r.key, "/", r.seq)] = true
			if !peer.deliveredID(q, r.id) {
				undelivered++
			}
		}
		lost, ackedUndelivered := 0, 0
		for _, e := range acked[q] {
			if !have[fmt.Sprint(e.Key, "/", e.Seq)] {
				lost++
			}
			if !peer.deliveredSeq(q, e.Key, e.Seq) {
				ackedUndelivered++
			}
		}
		f := peer.figures(q)
		// stored = acknowledged + commits whose acknowledgement the shutdown cut off + the 5 rows
		// written after the drain.
		lines = append(lines, fmt.Sprintf("failover %s: acknowledged=%d committed unacknowledged=%d stored=%d delivered=%d "+
			"duplicates=%d first delivery after promotion=%s", strings.TrimPrefix(q, "public.fo_"), len(acked[q]),
			len(stored)-len(acked[q])-5, len(stored), f.delivered, f.duplicates, f.reconnect.Round(time.Millisecond)))
		require.Zero(t, lost, "%s: every acknowledged commit is on the new primary (synchronous standby)", q)
		require.Zero(t, ackedUndelivered, "%s: every acknowledged commit reached the peer", q)
		require.Zero(t, undelivered, "%s: every stored row reached the peer", q)
		require.Equal(t, len(stored), f.delivered, "%s: the peer saw exactly the stored rows", q)
		require.Empty(t, f.violations, "%s: per key, delivered in id order (repeats only as retries of the same id)", q)
		require.NotZero(t, f.reconnect, "%s: delivered after the promotion", q)
	}

	fmt.Printf("failover: run=%s primary stop (fast)=%s, promotion after %s, drained %s after promotion; "+
		"acknowledged %d before the stop, %d in all; producer errors=%d; standby drainer: %d failed claims in %s before the promotion; "+
		"repair dry runs=%d\n%s\n",
		time.Since(started).Round(time.Second), stopTook.Round(time.Millisecond), promoteAt.Sub(stopAt).Round(time.Millisecond),
		drainedAt.Sub(promoteAt).Round(time.Millisecond), ackedBefore, ackedCount.Load(), prodErrs.Load(), earlyFailures,
		earlyWindow.Round(time.Millisecond), repairChecks.Load(), strings.Join(lines, "\n"))
	t.Logf("what the drainers logged (Warn and above):\n%s", tally)
	t.Logf("what the drainer on the standby logged (Warn and above):\n%s", earlyTally)

	require.Zero(t, tally.count("ERROR")+earlyTally.count("ERROR"),
		"every error the failover caused is known as the database being unavailable (logged at Warn)")
	require.NotZero(t, tally.count("database unavailable"), "the drainers saw the failover")
	require.NotZero(t, tally.count("starting failed; retrying (database unavailable)"),
		"the drainer started with no primary waited for one")
	require.Empty(t, repairs, "outbox.repair (dry run) on the new primary finds nothing to repair")
	require.NotZero(t, repairChecks.Load(), "the repair check ran during the recovery")
	// Retrying with backoff (100ms doubling to 5s): a handful of attempts in the window, not a
	// tight loop.
	require.NotZero(t, earlyFailures, "the drainer on the standby tried to claim and failed")
	require.LessOrEqual(t, earlyFailures, 8+int(earlyWindow/(5*time.Second)),
		"the drainer on the standby backs off between failed claims (%d in %s)", earlyFailures, earlyWindow)
}
