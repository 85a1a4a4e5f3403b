package gocheck

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// drFill inserts n events with op and keys "k<i>" in one statement (as the queue's owner).
func drFill(t *testing.T, q *drQueue, op string, n int) {
	t.Helper()
	_, err := q.pool.Exec(context.Background(), `
		INSERT INTO public.events (event_type, payload)
		SELECT $1, jsonb_build_object('key', 'k' || g, 'op', $1::text, 'seq', g) FROM generate_series(1, $2) g`, op, n)
	require.NoError(t, err)
}

// Lease mode is a continuous pipeline: while one apply takes 2 s, the other apply slots keep
// taking rows and their results are recorded, so the 500 rows behind the slow one are all sent
// (recorded in the queue) before it returns. Run as pgdrain_worker.
func TestDrainer_Pipeline_SlowApplyDoesNotStallTheRest(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	q.enqueue(t, "slow", "slow", 0) // the lowest id: claimed first
	const others = 500
	drFill(t, q, "fast", others)
	worker := loginPool(t, q.db, "pgdrain_worker")

	cfg := q.config(drainer.ClaimLease)
	cfg.ApplyConcurrency, cfg.ApplyTimeout, cfg.Lease = 16, 5*time.Second, 0
	var sentWhenSlowReturned atomic.Int64
	sentWhenSlowReturned.Store(-1)
	var slowCalls atomic.Int32
	logger, buf := drCapture(t)
	d, reg := drNew(t, worker, cfg, func(ctx context.Context, _ string, e drEvent) error {
		if e.Op != "slow" {
			return nil
		}
		slowCalls.Add(1)
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		sentWhenSlowReturned.Store(q.sent(t))
		return nil
	}, drainer.WithLogger[drEvent](logger))
	stop := drStart(t, d)
	drWaitFor(t, 20*time.Second, "every row sent", func() bool { return q.sent(t) == others+1 })
	require.NoError(t, stop())

	require.EqualValues(t, others, sentWhenSlowReturned.Load(),
		"every other row was claimed, applied and recorded while the slow apply ran")
	require.EqualValues(t, 1, slowCalls.Load())
	require.Equal(t, float64(others+1), drResults(t, reg, "sent"))
	require.Equal(t, 0.0, drMetric(t, reg, "pgdrain_outbox_lease_lost_total", nil))
	drNoPrivilegeErrors(t, buf.String())
}

// With applies much faster than a claim, a lease-mode drainer's claims take the whole window:
// after a full claim the next one waits (at most a millisecond) for the rows just dispatched to
// free their slots. Before, it claimed the part of the window that had freed during the previous
// claim at once, and claims alternated around half of ApplyConcurrency (16.2 rows per claim at
// 32), each costing about as much as a full one. 3,200 rows with a no-op Applier: at least 20 rows
// per claim on average (the claims are counted by the claim-duration histogram; 106-115 claims here,
// 28-30 rows each, with both cores busy; the old code took 202). Run as pgdrain_worker.
func TestDrainer_Pipeline_FastAppliesGetFullClaims(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	const rows, window = 3200, 32
	drFill(t, q, "fast", rows)
	worker := loginPool(t, q.db, "pgdrain_worker")

	cfg := q.config(drainer.ClaimLease)
	cfg.ApplyConcurrency, cfg.ApplyTimeout, cfg.Lease = window, 5*time.Second, 0
	logger, buf := drCapture(t)
	d, reg := drNew(t, worker, cfg, func(context.Context, string, drEvent) error { return nil },
		drainer.WithLogger[drEvent](logger))
	stop := drStart(t, d)
	drWaitFor(t, 60*time.Second, "every row sent", func() bool { return q.sent(t) == rows })
	require.NoError(t, stop())

	claims := drMetric(t, reg, "pgdrain_outbox_claim_duration_seconds", map[string]string{"mode": "lease"})
	require.Equal(t, float64(rows), drResults(t, reg, "sent"))
	t.Logf("%v claims for %d rows", claims, rows)
	require.LessOrEqual(t, claims, float64(rows/20),
		"%v claims for %d rows: fewer than 20 rows per claim on average (a window of %d)", claims, rows, window)
	drNoPrivilegeErrors(t, buf.String())
}

// Claims wait for the recorder: with fast applies and results slow to record (a trigger on the
// queue table sleeps 2 ms per row made sent), a lease-mode drainer does not claim ahead of what it
// has recorded. Before, it kept claiming while results piled up (4 replicas at BatchSize 256 held
// more than 10,000, which apply_results refuses, and every claim walked past their heads in
// flight). Leased unsent rows are sampled during the drain: at most a claim in the slots and five
// claims' worth of results (under four when a claim starts, and its rows), never the whole queue.
// Run as pgdrain_worker.
func TestDrainer_Pipeline_ClaimsWaitForTheRecorder(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	const rows, batch = 1500, 50
	drFill(t, q, "fast", rows)
	_, err := q.pool.Exec(context.Background(), `
		CREATE FUNCTION public.slow_record() RETURNS trigger LANGUAGE plpgsql AS
		  $$BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END$$;
		CREATE TRIGGER slow_record BEFORE UPDATE ON public.events FOR EACH ROW
		  WHEN (OLD.sent_at IS NULL AND NEW.sent_at IS NOT NULL) EXECUTE FUNCTION public.slow_record()`)
	require.NoError(t, err)
	worker := loginPool(t, q.db, "pgdrain_worker")

	cfg := q.config(drainer.ClaimLease)
	cfg.BatchSize, cfg.ApplyConcurrency, cfg.ApplyTimeout, cfg.Lease = batch, 1, 5*time.Second, time.Minute
	logger, buf := drCapture(t)
	d, _ := drNew(t, worker, cfg, func(context.Context, string, drEvent) error { return nil },
		drainer.WithLogger[drEvent](logger))
	stop := drStart(t, d)
	var most int64
	drWaitFor(t, 60*time.Second, "every row sent", func() bool {
		most = max(most, q.count(t, `SELECT count(*) FROM public.events WHERE sent_at IS NULL AND leased_until > now()`))
		return q.sent(t) == rows
	})
	require.NoError(t, stop())
	t.Logf("at most %d rows leased and not yet recorded (BatchSize %d, %d rows)", most, batch, rows)
	require.LessOrEqual(t, most, int64(6*batch),
		"claims ran ahead of the recorder: %d rows leased and unrecorded at once (BatchSize %d)", most, batch)
	drNoPrivilegeErrors(t, buf.String())
}

// An Applier that ignores its context does not hold shutdown: Run returns once ApplyTimeout has
// passed after the cancellation, having recorded the applies that did return. The hung row is
// not recorded: in lease mode its lease ends and it is delivered again; in lock mode the COMMIT
// leaves it untouched and it is claimable at once. Run as pgdrain_worker.
func TestDrainer_Pipeline_ContextIgnoringApplyDoesNotHoldShutdown(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{})
		hung := q.enqueue(t, "hung", "hung", 0)
		q.enqueue(t, "a", "fast", 1)
		q.enqueue(t, "b", "fast", 2)
		worker := loginPool(t, q.db, "pgdrain_worker")
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })

		cfg := q.config(mode)
		cfg.ApplyConcurrency, cfg.ApplyTimeout = 3, 500*time.Millisecond
		cfg.LockTransactionTimeout = 30 * time.Second // only the shutdown bounds the batch here
		hungStarted := make(chan struct{})
		logger, buf := drCapture(t)
		d, reg := drNew(t, worker, cfg, func(ctx context.Context, _ string, e drEvent) error {
			if e.Op == "hung" {
				close(hungStarted)
				<-release // ignores ctx
				return nil
			}
			return nil
		}, drainer.WithLogger[drEvent](logger))
		stop := drStart(t, d)
		<-hungStarted
		if mode == drainer.ClaimLease {
			drWaitFor(t, 10*time.Second, "the fast rows sent", func() bool { return q.sent(t) == 2 })
		} else {
			time.Sleep(200 * time.Millisecond) // the fast applies have returned; their batch is open
		}
		began := time.Now()
		require.NoError(t, stop())
		took := time.Since(began)
		require.Less(t, took, cfg.ApplyTimeout+time.Second, "Run returned within ApplyTimeout (plus slack) of the cancellation")
		require.GreaterOrEqual(t, took, cfg.ApplyTimeout-50*time.Millisecond, "the applies in flight were given ApplyTimeout")

		require.EqualValues(t, 2, q.sent(t), "the applies that returned are recorded")
		require.Equal(t, 2.0, drResults(t, reg, "sent"))
		require.EqualValues(t, 0, q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND (sent_at IS NOT NULL OR attempt_count <> 0)`, hung),
			"the hung row is not recorded")
		if mode == drainer.ClaimLock {
			require.EqualValues(t, 1, drClaimCount(t, q.pool, mode, q.table, 10), "the COMMIT left the hung row claimable")
		}
		require.Contains(t, buf.String(), "applies still running after ApplyTimeout at shutdown")
		drNoPrivilegeErrors(t, buf.String())
	})
}

// Results are recorded before their leases end even when applies finish late and others keep the
// pipeline busy: every row's result is written (server clock) before the leased_until it was
// claimed with. Applies use their whole deadline (lease end minus LeaseMargin) before failing
// transiently once, and one apply hangs past the lease all along. Run as pgdrain_worker.
func TestDrainer_Pipeline_ResultsRecordedBeforeTheirLeaseEnds(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	ctx := context.Background()
	_, err := q.pool.Exec(ctx, `
		CREATE TABLE public.recorded (id bigint, recorded_at timestamptz, leased_until timestamptz);
		CREATE FUNCTION public.note_recorded() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
		BEGIN
		  INSERT INTO public.recorded VALUES (OLD.id, pg_catalog.clock_timestamp(), OLD.leased_until);
		  RETURN NEW;
		END $$;
		CREATE TRIGGER note_recorded BEFORE UPDATE ON public.events FOR EACH ROW
		  WHEN (OLD.lease_token IS NOT NULL AND NEW.lease_token IS NULL AND NEW.leased_until IS NULL
		        AND (NEW.sent_at IS NOT NULL OR NEW.attempt_count > OLD.attempt_count))
		  EXECUTE FUNCTION public.note_recorded();`)
	require.NoError(t, err)
	q.enqueue(t, "hung", "hung", 0)
	const n = 40
	drFill(t, q, "late", n)
	worker := loginPool(t, q.db, "pgdrain_worker")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })

	cfg := q.config(drainer.ClaimLease)
	// Lease 1.5s: an apply's deadline is claim + 0.5s, so a late result has 1s left to be written.
	cfg.ApplyConcurrency, cfg.ApplyTimeout, cfg.Lease = 8, 400*time.Millisecond, 1500*time.Millisecond
	var failed drSeen
	d, reg := drNew(t, worker, cfg, func(ctx context.Context, _ string, e drEvent) error {
		if e.Op == "hung" {
			<-release
			return nil
		}
		if failed.firstTime(e.Seq) {
			<-ctx.Done() // use the whole deadline
			return errors.New("peer timed out")
		}
		return nil
	})
	drStart(t, d)
	drWaitFor(t, 30*time.Second, "every late row sent", func() bool { return q.sent(t) == n })

	var late, total int64
	require.NoError(t, q.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE recorded_at >= leased_until), count(*) FROM public.recorded`).Scan(&late, &total))
	require.EqualValues(t, 2*n, total, "each late row recorded twice: transient, then sent")
	require.Zero(t, late, "no result was written after the lease it was claimed with had ended")
	require.Equal(t, 0.0, drMetric(t, reg, "pgdrain_outbox_lease_lost_total", nil))
	require.Equal(t, float64(n), drResults(t, reg, "transient"))
}

// drSeen remembers which seqs have been seen.
type drSeen struct {
	seen [1024]atomic.Bool
}

func (s *drSeen) firstTime(seq int) bool { return !s.seen[seq].Swap(true) }

// A lock-mode batch never outlives LockTransactionTimeout: with one Applier hanging (ignoring its
// context), the batch commits what returned when the bound is reached, and the hung row is left
// unlocked and untouched. The hung apply keeps its slot until it returns (here the only one, so
// nothing more is claimed meanwhile: a drainer never applies one row twice at the same time);
// then the next batch delivers the hung row again and the rest. Run as pgdrain_worker.
func TestDrainer_LockMode_BatchBoundedByLockTransactionTimeout(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	hung := q.enqueue(t, "hung", "hung", 0)
	for i := range 3 {
		q.enqueue(t, "k", "fast", i+1)
	}
	worker := loginPool(t, q.db, "pgdrain_worker")
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

	cfg := q.config(drainer.ClaimLock)
	cfg.BatchSize, cfg.ApplyTimeout = 4, 300*time.Millisecond
	bound := drainer.DefaultLockTransactionTimeout(cfg.BatchSize, cfg.ApplyConcurrency, cfg.ApplyTimeout)
	require.Equal(t, 4*300*time.Millisecond+drainer.LeaseMargin, bound)
	var hungCalls, hungRunning, hungAtOnce atomic.Int32
	logger, buf := drCapture(t)
	d, reg := drNew(t, worker, cfg, func(ctx context.Context, _ string, e drEvent) error {
		if e.Op == "hung" {
			if n := hungRunning.Add(1); n > hungAtOnce.Load() {
				hungAtOnce.Store(n)
			}
			defer hungRunning.Add(-1)
			if hungCalls.Add(1) == 1 {
				<-release // ignores ctx
			}
		}
		return nil
	}, drainer.WithLogger[drEvent](logger))
	began := time.Now()
	drStart(t, d)
	// The hung apply holds the only slot, so the first batch settles nothing; at its bound it
	// commits, unlocking every row untouched.
	drWaitFor(t, bound+time.Second, "the first batch ended at its bound", func() bool {
		return strings.Contains(buf.String(), "lock-mode batch reached LockTransactionTimeout")
	})
	require.Less(t, time.Since(began), bound+time.Second, "the first batch ended at its bound, not when the hung apply returned")
	time.Sleep(bound) // another bound's worth: no second batch while the slot is held
	require.Zero(t, q.sent(t), "nothing claimed while the only apply slot is held by the hung apply")
	require.EqualValues(t, 1, hungCalls.Load(), "the hung row was not applied again while its apply ran")
	require.EqualValues(t, 0, q.count(t, `SELECT attempt_count FROM public.events WHERE id = $1`, hung),
		"the hung row was left untouched (no attempt counted)")
	releaseOnce.Do(func() { close(release) })
	drWaitFor(t, 10*time.Second, "every row sent", func() bool { return q.sent(t) == 4 })
	require.EqualValues(t, 2, hungCalls.Load(), "the hung row was delivered again by the next batch")
	require.EqualValues(t, 1, hungAtOnce.Load(), "never two applies of the hung row at once")
	// The counters move just after the COMMIT that the test saw: wait for them.
	drWaitFor(t, 10*time.Second, "4 results counted", func() bool { return drResults(t, reg, "sent") == 4.0 })
	drNoPrivilegeErrors(t, buf.String())
}

// A role whose idle_in_transaction_session_timeout is shorter than a lock-mode batch's applies
// does not end the batch: the claim transaction runs with the drainer's own bound
// (LockTransactionTimeout + 2*LeaseMargin). The server used to end every such batch, and its rows,
// unlocked untouched, were claimed and delivered again for ever without an attempt counted.
func TestDrainer_LockMode_ShortIdleInTransactionTimeout_DoesNotEndTheBatch(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	for i := range 3 {
		q.enqueue(t, "k", "op", i+1)
	}
	login := loginPool(t, q.db, "pgdrain_worker")
	role := login.Config().ConnConfig.User
	_, err := q.pool.Exec(context.Background(), `ALTER ROLE `+role+` SET idle_in_transaction_session_timeout = '300ms'`)
	require.NoError(t, err)
	worker, err := pgxpool.New(context.Background(), login.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(worker.Close)
	var idle string
	require.NoError(t, worker.QueryRow(context.Background(), `SHOW idle_in_transaction_session_timeout`).Scan(&idle))
	require.Equal(t, "300ms", idle)

	cfg := q.config(drainer.ClaimLock)
	cfg.BatchSize, cfg.ApplyTimeout = 3, time.Second
	var applied drLog
	logger, buf := drCapture(t)
	d, reg := drNew(t, worker, cfg, func(ctx context.Context, _ string, e drEvent) error {
		applied.add(ctx, e)
		time.Sleep(400 * time.Millisecond) // the transaction is idle meanwhile, longer than the role allows
		return nil
	}, drainer.WithLogger[drEvent](logger))
	stop := drStart(t, d)
	drWaitFor(t, 15*time.Second, "every row sent", func() bool { return q.sent(t) == 3 })
	require.NoError(t, stop())

	log := buf.String()
	require.NotContains(t, log, "25P03", "no batch was ended by the server")
	require.Equal(t, 3, applied.len(), "each row delivered once")
	require.EqualValues(t, 0, q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count <> 0 OR sent_at IS NULL`),
		"nothing lost, no attempt counted")
	require.Equal(t, 3.0, drResults(t, reg, "sent"))
	require.NotContains(t, log, "permission denied")
	var after string
	require.NoError(t, worker.QueryRow(context.Background(), `SHOW idle_in_transaction_session_timeout`).Scan(&after))
	require.Equal(t, "300ms", after, "the role's setting is untouched outside the claim transactions")
}

// Validate reports every problem at once, one line each, each line starting with its field name;
// LockTransactionTimeout is checked against BatchSize, ApplyConcurrency and ApplyTimeout in lock
// mode; the Expect fields' zero values expect nothing.
func TestDrainer_Validate_ReportsEveryErrorAndTheLockBound(t *testing.T) {
	t.Parallel()
	err := drainer.Config{
		// A Lease given is checked on its own; one left to its default (derived from the bad
		// ApplyTimeout) is not reported a second time.
		BatchSize: -1, PollFallback: -time.Second, ApplyTimeout: -time.Second, Lease: -time.Second, ClaimMode: 7,
		ExpectMaxAttempts: -1, ExpectPermanentPolicy: 9, ExpectChannel: "a b",
	}.Validate()
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	var fields []string
	for _, l := range lines {
		fields = append(fields, strings.SplitN(l, " ", 2)[0])
	}
	require.Equal(t, []string{"Table", "BatchSize", "PollFallback", "ApplyTimeout", "Lease", "ClaimMode",
		"ExpectChannel", "ExpectMaxAttempts", "ExpectPermanentPolicy"}, fields, "every error, each starting with its field: %v", err)
	require.Contains(t, err.Error(), "Lease must be positive, got -1s")

	lock := drainer.Config{Table: "public.events", ClaimMode: drainer.ClaimLock, BatchSize: 10, ApplyTimeout: time.Second}
	require.NoError(t, lock.Validate(), "the default bound fits the batch")
	require.Equal(t, 11*time.Second, drainer.DefaultLockTransactionTimeout(10, 1, time.Second))
	require.Equal(t, 161*time.Second, drainer.DefaultLockTransactionTimeout(0, 0, 0), "the seed's defaults: 32 rows x 5s + 1s")
	require.Equal(t, 6*time.Second, drainer.DefaultLockTransactionTimeout(10, 8, 5*time.Second), "one wave when ApplyConcurrency > 1")

	short := lock
	short.LockTransactionTimeout = 5 * time.Second
	err = short.Validate()
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "LockTransactionTimeout must be at least 11s"), "%v", err)
	require.Contains(t, err.Error(), "lower BatchSize or ApplyTimeout, or raise ApplyConcurrency")
	_, err = drainer.New(drPoolForValidation(t), short, drDecode, func(context.Context, string, drEvent) error { return nil })
	require.Error(t, err, "New refuses it too")

	short.ApplyConcurrency = 10 // a claim is then 10 rows applied at once: one wave of 1s
	require.NoError(t, short.Validate())
	short.ClaimMode = drainer.ClaimLease
	short.ApplyConcurrency = 1
	require.NoError(t, short.Validate(), "lease mode does not use the bound")
	short.LockTransactionTimeout = -time.Second
	require.ErrorContains(t, short.Validate(), "LockTransactionTimeout must be positive")
	long := lock
	long.LockTransactionTimeout = 25 * time.Hour
	require.ErrorContains(t, long.Validate(), "LockTransactionTimeout must be at most 24h0m0s")

	require.NoError(t, drainer.Config{Table: "t", ExpectPermanentPolicy: drainer.PoisonPermanent,
		ExpectPartitionColumn: "resource_id", ExpectMaxAttempts: 3, ExpectBackoffMin: time.Second}.Validate())
	require.Equal(t, "", drainer.PermanentPolicy(0).String(), "the zero value expects nothing")
	require.Equal(t, "poison", drainer.PoisonPermanent.String())
}
