package gocheck

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// misbehaving is an error type whose Error dereferences its receiver: returned as a nil pointer it
// is a non-nil error (a typed nil) whose text panics when read.
type misbehaving struct{ text string }

func (e *misbehaving) Error() string { return e.text }

// Appliers that end their goroutine another way than by returning cost their row, never the
// process: a typed nil error (its Error panics when the drainer reads it) and runtime.Goexit
// (t.FailNow in a test's Applier) are recorded as permanent failures, like a panic, and Run goes
// on draining. Both crashed the process, or took the apply slot for good, before.
func TestDrainer_AnApplierThatPanicsOutsideItsCallCostsOnlyItsRow(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{maxAttempts: 5})
		typedNil := q.enqueue(t, "a", "typed-nil", 1)
		goexit := q.enqueue(t, "b", "goexit", 1)
		ok := q.enqueue(t, "c", "ok", 1)
		d, _ := drNew(t, q.pool, q.config(mode), func(ctx context.Context, _ string, e drEvent) error {
			switch e.Op {
			case "typed-nil":
				var err *misbehaving
				return err
			case "goexit":
				runtime.Goexit()
			}
			return nil
		})
		stop := drStart(t, d)
		drWaitFor(t, 10*time.Second, "every row settled", func() bool {
			return q.count(t, `SELECT count(*) FROM public.events WHERE sent_at IS NOT NULL OR attempt_count = 5`) == 3
		})
		require.NoError(t, stop())
		lastError := func(id int64) string {
			var text string
			require.NoError(t, q.pool.QueryRow(context.Background(),
				`SELECT last_error FROM public.events WHERE id = $1 AND attempt_count = 5`, id).Scan(&text))
			return text
		}
		require.Contains(t, lastError(typedNil), "panic: runtime error: invalid memory address or nil pointer dereference")
		require.Contains(t, lastError(goexit), "the Applier called runtime.Goexit")
		require.Equal(t, int64(1), q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND sent_at IS NOT NULL`, ok))
	})
}

// hangingApplier blocks on rows of op "hang" until released, ignoring its context, and counts how
// many applies of them run at once.
type hangingApplier struct {
	release   chan struct{}
	calls     atomic.Int32
	running   atomic.Int32
	maxAtOnce atomic.Int32
}

func (h *hangingApplier) apply(ctx context.Context, _ string, e drEvent) error {
	if e.Op != "hang" {
		return nil
	}
	h.calls.Add(1)
	n := h.running.Add(1)
	defer h.running.Add(-1)
	for {
		m := h.maxAtOnce.Load()
		if n <= m || h.maxAtOnce.CompareAndSwap(m, n) {
			break
		}
	}
	<-h.release
	return nil
}

// Lock mode: an apply that ignores its context is given up on when its batch reaches
// LockTransactionTimeout, and its row, unlocked untouched, is claimed again by the next batch.
// It is not applied again while the first apply runs (27 applies of one row ran at once in 8 s
// before), it keeps its apply slot, and the other slots go on delivering other keys' rows. Once
// it returns, the row is delivered again and recorded.
func TestDrainer_LockMode_AnApplyGivenUpOnIsNotStartedAgainWhileItRuns(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
	q.enqueue(t, "stuck", "hang", 1)
	h := &hangingApplier{release: make(chan struct{})}
	cfg := q.config(drainer.ClaimLock)
	cfg.ApplyTimeout, cfg.ApplyConcurrency = 200*time.Millisecond, 2
	d, _ := drNew(t, q.pool, cfg, h.apply)
	stop := drStart(t, d)
	drWaitFor(t, 10*time.Second, "the hanging apply started", func() bool { return h.calls.Load() == 1 })
	for i := range 20 {
		q.enqueue(t, "k"+string(rune('a'+i)), "ok", 1)
		time.Sleep(50 * time.Millisecond) // a batch every LockTransactionTimeout (1.4s) would not keep up
	}
	drWaitFor(t, 10*time.Second, "the other keys' rows delivered beside it", func() bool { return q.sent(t) == 20 })
	require.Equal(t, int32(1), h.calls.Load(), "the row given up on was not applied again while its apply ran")
	close(h.release)
	drWaitFor(t, 10*time.Second, "the row delivered again once its apply returned", func() bool { return q.sent(t) == 21 })
	require.NoError(t, stop())
	require.Equal(t, int32(1), h.maxAtOnce.Load(), "never two applies of the row at once")
	require.Equal(t, int32(2), h.calls.Load(), "delivered again once, after the first apply returned")
}

// With one apply slot held by an apply given up on, a lock-mode drainer claims nothing until it
// returns: it does not claim rows it has no slot for, nor the same row again and again.
func TestDrainer_LockMode_ClaimsNothingWhileEverySlotIsHeldByAnApplyGivenUpOn(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	q.enqueue(t, "a", "hang", 1)
	h := &hangingApplier{release: make(chan struct{})}
	cfg := q.config(drainer.ClaimLock)
	cfg.ApplyTimeout, cfg.BatchSize = 200*time.Millisecond, 1
	d, _ := drNew(t, q.pool, cfg, h.apply)
	stop := drStart(t, d)
	drWaitFor(t, 10*time.Second, "the hanging apply started", func() bool { return h.calls.Load() == 1 })
	q.enqueue(t, "b", "ok", 1)
	time.Sleep(3 * time.Second) // two LockTransactionTimeouts (1.2s)
	require.Equal(t, int32(1), h.calls.Load(), "the hanging row was not applied again")
	require.Zero(t, q.sent(t), "nothing is claimed while the only slot is held")
	close(h.release)
	drWaitFor(t, 10*time.Second, "both rows delivered once the slot freed", func() bool { return q.sent(t) == 2 })
	require.NoError(t, stop())
	require.Equal(t, int32(1), h.maxAtOnce.Load())
}

// A second Run of the same Drainer does not apply a row whose apply, started by the first Run and
// given up on at its shutdown, still runs: the row, claimed again once its lease ended, waits for
// that apply to return.
func TestDrainer_ARunAfterAnotherWaitsForTheApplyItLeftRunning(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	q.enqueue(t, "a", "hang", 1)
	h := &hangingApplier{release: make(chan struct{})}
	cfg := q.config(drainer.ClaimLease)
	cfg.ApplyTimeout, cfg.Lease = 200*time.Millisecond, 1300*time.Millisecond
	d, _ := drNew(t, q.pool, cfg, h.apply)
	stop := drStart(t, d)
	drWaitFor(t, 10*time.Second, "the hanging apply started", func() bool { return h.calls.Load() == 1 })
	require.NoError(t, stop())
	stop = drStart(t, d)
	time.Sleep(3 * time.Second) // the lease ends; the second Run claims the row again
	require.Equal(t, int32(1), h.calls.Load(), "not applied again while the first Run's apply runs")
	close(h.release)
	drWaitFor(t, 10*time.Second, "the row delivered once that apply returned", func() bool { return q.sent(t) == 1 })
	require.NoError(t, stop())
	require.Equal(t, int32(1), h.maxAtOnce.Load())
}

// A TxApplier's panic is its batch's error: the transaction is rolled back, the rows are claimed
// again, Run goes on (the panic escaped Run before). One that ignores its context is given up on a
// second past its deadline (its connection closed: the server rolls the transaction back) and
// holds neither Run's shutdown nor the rows' locks (Run waited for it for ever before).
func TestDrainerTxApplier_APanicOrAHangCostsOnlyItsBatch(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
	q.enqueue(t, "a", "op", 1)
	var calls atomic.Int32
	hang := make(chan struct{})
	var hangOnce sync.Once
	apply := func(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
		switch calls.Add(1) {
		case 1:
			panic("boom in the TxApplier")
		case 2:
			<-hang // ignores ctx
			return errors.New("given up on long ago")
		}
		return nil
	}
	cfg := q.config(drainer.ClaimLock)
	cfg.ApplyTimeout = 200 * time.Millisecond
	d, err := drainer.New(q.pool, cfg, drDecode, nil, drainer.WithTxApplier[drEvent](apply), drainer.WithLogger[drEvent](drLogger(t)))
	require.NoError(t, err)
	defer hangOnce.Do(func() { close(hang) })
	stop := drStart(t, d)
	drWaitFor(t, 10*time.Second, "the hanging call", func() bool { return calls.Load() == 2 })
	time.Sleep(1500 * time.Millisecond) // past its deadline and the second of grace: given up on
	var locked bool
	require.NoError(t, q.pool.QueryRow(context.Background(),
		`SELECT NOT EXISTS (SELECT 1 FROM public.events FOR UPDATE SKIP LOCKED)`).Scan(&locked))
	require.False(t, locked, "the given-up transaction's row lock is gone")
	require.Equal(t, int32(2), calls.Load(), "no other batch while the given-up call runs")
	stopped := time.Now()
	require.NoError(t, stop())
	require.Less(t, time.Since(stopped), 2*time.Second, "Run does not wait for the given-up call")

	hangOnce.Do(func() { close(hang) })
	stop = drStart(t, d)
	drWaitFor(t, 10*time.Second, "the row delivered by the third call", func() bool { return q.sent(t) == 1 })
	require.NoError(t, stop())
	require.Equal(t, int32(3), calls.Load())
}

// Stopped while the database refuses connections at start, Run says so with an error matching its
// context's (a supervisor stopping it during an outage can tell that from a failure).
func TestDrainer_StoppedBeforeTheDatabaseLetItStart(t *testing.T) {
	t.Parallel()
	pool := drUnreachablePool(t)
	d, err := drainer.New(pool, drainer.Config{Table: "public.events"}, drDecode,
		func(context.Context, string, drEvent) error { return nil }, drainer.WithLogger[drEvent](drLogger(t)))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err = d.Run(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "stopped before the drainer could start")
	require.ErrorContains(t, err, "pinging database")
}

// drUnreachablePool is a pool of a server that refuses every connection (a port nothing listens
// on), as a database that is down looks.
func drUnreachablePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(),
		fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pgdrain?connect_timeout=2", freePort(t)))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
