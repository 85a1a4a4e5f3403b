package gocheck

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// A TxApplier writes in the claim transaction: when a call fails, nothing it wrote stays (its rows
// are then applied one at a time; here each of those calls succeeds, so no attempt is counted);
// when it succeeds, its writes and the rows' results commit together. A transaction claims again in itself while rows come (for up to
// drainer.TxApplierRounds), so a busy key may move several events per transaction, in order.
// Lease mode refuses it.
func TestDrainerTxApplier_WritesWithTheResultsOrNotAtAll(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	ctx := context.Background()
	_, err := q.pool.Exec(ctx, `CREATE TABLE public.applied (n serial, tx bigint, key text, seq int)`)
	require.NoError(t, err)
	for seq := range 5 {
		q.enqueue(t, "busy", "op", seq)
	}
	for seq := range 3 {
		q.enqueue(t, "calm", "op", seq)
	}

	var calls atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
		for _, e := range batch {
			p, err := drDecode(e.Payload)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO public.applied (tx, key, seq) VALUES (txid_current(), $1, $2)`, p.Key, p.Seq); err != nil {
				return err
			}
		}
		if calls.Add(1) == 1 {
			return errors.New("the first batch fails after writing")
		}
		return nil
	}
	cfg := q.config(drainer.ClaimLock)
	cfg.BatchSize, cfg.ApplyConcurrency = 8, 8
	_, err = drainer.New(q.pool, drainer.Config{Table: q.table}, drDecode, nil, drainer.WithTxApplier[drEvent](apply))
	require.EqualError(t, err, "WithTxApplier needs ClaimMode ClaimLock: it writes in the claim transaction")
	d, err := drainer.New(q.pool, cfg, drDecode, nil, drainer.WithTxApplier[drEvent](apply), drainer.WithLogger[drEvent](drLogger(t)))
	require.NoError(t, err)
	stop := drStart(t, d)
	drWaitFor(t, 30*time.Second, "every row sent", func() bool { return q.sent(t) == 8 })
	require.NoError(t, stop())

	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count > 0`), "a failed TxApplier counts no attempt")
	rows, err := q.pool.Query(ctx, `SELECT key, seq FROM public.applied ORDER BY n`)
	require.NoError(t, err)
	seqs := map[string][]int{}
	var key string
	var seq int
	_, err = pgx.ForEachRow(rows, []any{&key, &seq}, func() error {
		seqs[key] = append(seqs[key], seq)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, map[string][]int{"busy": {0, 1, 2, 3, 4}, "calm": {0, 1, 2}}, seqs,
		"each event written once (the failed batch's writes rolled back), each key in order")
	// Rounds go on for drainer.TxApplierRounds: on an idle machine the five rounds the busy key
	// needs fit in one transaction; a loaded one may take two or three.
	t.Logf("8 events in %d transaction(s)", q.count(t, `SELECT count(DISTINCT tx) FROM public.applied`))
}

// One row a TxApplier can never apply (a sink's queue refuses it, a check the row breaks) rolled the
// whole batch back with no attempt counted, and was first in every later batch: not one other row
// of the queue was ever sent, and nothing showed it but a log line (the s23 review: 0 of 10 good
// rows in 5 s). Now a failed call is undone (a savepoint) and the batch's rows are applied one at a
// time: the good rows are sent, each written once; the bad row is recorded as an Applier's error is
// (an attempt, its error, the backoff; Permanent poisons it), and its key's later row waits for it.
func TestDrainerTxApplier_ARowItCanNeverApplyHoldsBackOnlyItsKey(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	ctx := context.Background()
	_, err := q.pool.Exec(ctx, `CREATE TABLE public.applied (id bigint)`)
	require.NoError(t, err)
	bad := q.enqueue(t, "bad", "op", 0)
	badNext := q.enqueue(t, "bad", "op", 1)
	doomed := q.enqueue(t, "doomed", "op", 0)
	for i := range 10 {
		q.enqueue(t, fmt.Sprintf("k%d", i), "op", 0)
	}
	var calls atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
		calls.Add(1)
		for _, e := range batch {
			if _, err := tx.Exec(ctx, `INSERT INTO public.applied (id) VALUES ($1)`, e.ID); err != nil {
				return err
			}
		}
		for _, e := range batch {
			switch e.ID {
			case bad:
				return errors.New("this row can never be copied")
			case doomed:
				return drainer.Permanent(errors.New("this row is refused for good"))
			}
		}
		return nil
	}
	cfg := q.config(drainer.ClaimLock)
	cfg.BatchSize, cfg.ApplyConcurrency = 8, 8
	d, err := drainer.New(q.pool, cfg, drDecode, nil, drainer.WithTxApplier[drEvent](apply), drainer.WithLogger[drEvent](drLogger(t)))
	require.NoError(t, err)
	stop := drStart(t, d)
	drWaitFor(t, 20*time.Second, "the ten good rows sent, the doomed one poisoned, the bad one tried again", func() bool {
		return q.sent(t) == 10 &&
			q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND attempt_count = 10`, doomed) == 1 &&
			q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND attempt_count >= 2`, bad) == 1
	})
	require.NoError(t, stop())

	var attempts int
	var lastError string
	require.NoError(t, q.pool.QueryRow(ctx, `SELECT attempt_count, last_error FROM public.events WHERE id = $1`, bad).Scan(&attempts, &lastError))
	require.Equal(t, "this row can never be copied", lastError, "the bad row's own error, where an operator looks")
	require.Less(t, attempts, 10, "a transient failure never poisons a partition's head")
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND sent_at IS NOT NULL`, badNext),
		"the bad row's key waits for it")
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.applied WHERE id = ANY ($1)`, []int64{bad, badNext, doomed}),
		"what the failed calls wrote is rolled back")
	require.Equal(t, int64(10), q.count(t, `SELECT count(*) FROM public.applied`), "every good row written once")
	require.Equal(t, int64(10), q.count(t, `SELECT count(DISTINCT id) FROM public.applied`))
}

// A failure whose result the database refuses (a retry time past the queue's max_delay, an error
// text the database's encoding can not hold) is recorded as lock mode records an Applier's: in a
// savepoint, and row by row, escaped and with the queue's backoff, when refused. Recorded without
// one (the first version of the row-by-row apply), the refusal aborted the claim transaction, and
// nothing of it committed, for ever (the session's review).
func TestDrainerTxApplier_AFailureTheDatabaseRefusesCostsOnlyItsKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, encoding string
		fail           func() error
	}{
		{"a retry time past max_delay", "", func() error {
			return drainer.RetryAt(errors.New("rate limited"), time.Now().Add(30*24*time.Hour))
		}},
		{"a text LATIN1 can not hold", "LATIN1", func() error { return errors.New("sink refused: 5 € over quota") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			opts := drQueueOpts{partitionColumn: "partition_key"}
			var q *drQueue
			if c.encoding != "" {
				q = drNewEncodedQueue(t, c.encoding, opts)
			} else {
				q = drNewQueue(t, opts)
			}
			bad := q.enqueue(t, "bad", "op", 0)
			for i := range 6 {
				q.enqueue(t, fmt.Sprintf("k%d", i), "op", 0)
			}
			apply := func(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
				for _, e := range batch {
					if e.ID == bad {
						return c.fail()
					}
				}
				return nil
			}
			cfg := q.config(drainer.ClaimLock)
			cfg.BatchSize, cfg.ApplyConcurrency = 8, 8
			d, err := drainer.New(q.pool, cfg, drDecode, nil, drainer.WithTxApplier[drEvent](apply), drainer.WithLogger[drEvent](drLogger(t)))
			require.NoError(t, err)
			stop := drStart(t, d)
			drWaitFor(t, 15*time.Second, "the six good rows sent and the bad row's attempt recorded", func() bool {
				return q.sent(t) == 6 && q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND attempt_count >= 1`, bad) == 1
			})
			require.NoError(t, stop())
			require.Equal(t, int64(1), q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND last_error LIKE '[pgdrain: PostgreSQL refused this result%'`, bad),
				"recorded escaped, saying why")
		})
	}
}

// An error that is the setup's, not a row's (here the relay's role without the privilege to write
// a sink's queue: 42501), charges no row an attempt: the batch is rolled back and claimed again,
// as before; once the setup is mended every row is sent, none with an attempt counted.
func TestDrainerTxApplier_ASetupErrorChargesNoRowAnAttempt(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	for i := range 6 {
		q.enqueue(t, "", "op", i)
	}
	var mended atomic.Bool
	var failures atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
		if !mended.Load() {
			failures.Add(1)
			// As the relay's fan-out wraps what PostgreSQL said.
			return fmt.Errorf("copying %d events into public.sink: %w", len(batch),
				&pgconn.PgError{Code: "42501", Message: "permission denied for table sink"})
		}
		return nil
	}
	cfg := q.config(drainer.ClaimLock)
	cfg.BatchSize, cfg.ApplyConcurrency = 8, 8
	d, err := drainer.New(q.pool, cfg, drDecode, nil, drainer.WithTxApplier[drEvent](apply), drainer.WithLogger[drEvent](drLogger(t)))
	require.NoError(t, err)
	stop := drStart(t, d)
	drWaitFor(t, 10*time.Second, "a few failed batches", func() bool { return failures.Load() >= 3 })
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count > 0 OR sent_at IS NOT NULL`),
		"no attempt counted, nothing recorded")
	mended.Store(true)
	drWaitFor(t, 15*time.Second, "every row sent once the setup is mended", func() bool { return q.sent(t) == 6 })
	require.NoError(t, stop())
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count > 0`))
}

// A row on which the TxApplier hangs until its context ends (a remote call inside the transaction,
// a statement that runs too long for one key's rows): with the configuration the docs advise
// (ApplyConcurrency the claim size, so LockTransactionTimeout allows one wave of ApplyTimeout), the
// batch's call used up the batch's time, no time was left to apply its rows one at a time, none was
// reached and so none was charged: every claim brought the same batch back and the queue stopped
// for good (the ten good rows not sent in 20 s). When the call ran a statement, its context closed
// pgx's connection, and the transaction was lost with it, uncharged, however few its rows. Now the
// rows of a batch that ran out of time are applied one at a time when they come back: the good rows
// are sent, the hanging row's own call runs out of time and is charged an attempt, as an Applier's
// timeout is (at its next claim when its call lost the transaction), and only its key waits.
func TestDrainerTxApplier_ARowOnWhichItHangsHoldsBackOnlyItsKey(t *testing.T) {
	t.Parallel()
	for _, hang := range []struct {
		name string
		wait func(ctx context.Context, tx pgx.Tx) error
	}{
		{"waits for its context", func(ctx context.Context, _ pgx.Tx) error {
			<-ctx.Done()
			return ctx.Err()
		}},
		{"a statement its context cancels", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT pg_sleep(60)`)
			return err
		}},
	} {
		t.Run(hang.name, func(t *testing.T) {
			t.Parallel()
			q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
			stuck := q.enqueue(t, "stuck", "op", 0)
			stuckNext := q.enqueue(t, "stuck", "op", 1)
			for i := range 10 {
				q.enqueue(t, fmt.Sprintf("k%d", i), "op", 0)
			}
			apply := func(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
				for _, e := range batch {
					if e.ID == stuck {
						return hang.wait(ctx, tx)
					}
				}
				return nil
			}
			cfg := q.config(drainer.ClaimLock)
			cfg.BatchSize, cfg.ApplyConcurrency = 8, 8
			cfg.ApplyTimeout = 300 * time.Millisecond
			d, err := drainer.New(q.pool, cfg, drDecode, nil, drainer.WithTxApplier[drEvent](apply), drainer.WithLogger[drEvent](drLogger(t)))
			require.NoError(t, err)
			stop := drStart(t, d)
			drWaitFor(t, 20*time.Second, "the ten good rows sent and the stuck row charged", func() bool {
				return q.sent(t) == 10 &&
					q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND attempt_count >= 1`, stuck) == 1
			})
			require.NoError(t, stop())

			var lastError string
			require.NoError(t, q.pool.QueryRow(context.Background(),
				`SELECT last_error FROM public.events WHERE id = $1`, stuck).Scan(&lastError))
			require.Contains(t, lastError, "the TxApplier ran out of its time", "an operator sees why")
			require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND sent_at IS NOT NULL`, stuckNext),
				"the stuck row's key waits for it")
		})
	}
}

// Several rows in one claim on which the TxApplier hangs in a statement its context cancels (a sink
// table locked for several keys): each such call loses the transaction with pgx's connection, and
// its row is charged at its next claim, without a call. That charge was forgotten as soon as it was
// taken: when a later hanging row of the same claim then lost the transaction, the charge was
// rolled back with it and the earlier row was called again (and lost the transaction again) at the
// claim after. The claims counted in binary over the hanging rows: 2^k-1 lost transactions before
// one committed, during which no good row behind them was sent (with 4 hanging keys 15 transactions
// of ApplyTimeout and the error backoff, about a minute; with 20, for ever). Now a charge is kept
// until it is recorded: k+1 transactions.
func TestDrainerTxApplier_SeveralHangingRowsInAClaimAreChargedInLinearTime(t *testing.T) {
	t.Parallel()
	// A charged row backs off for a minute: the calls counted are those before its charge.
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key", backoffMin: time.Minute, backoffMax: time.Hour})
	const hanging = 5
	stuck := map[int64]bool{}
	for i := range hanging {
		stuck[q.enqueue(t, fmt.Sprintf("stuck%d", i), "op", 0)] = true
	}
	for i := range 4 {
		q.enqueue(t, fmt.Sprintf("k%d", i), "op", 0)
	}
	var aloneCalls atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
		for _, e := range batch {
			if stuck[e.ID] {
				if len(batch) == 1 {
					aloneCalls.Add(1)
				}
				_, err := tx.Exec(ctx, `SELECT pg_sleep(60)`)
				return err
			}
		}
		return nil
	}
	cfg := q.config(drainer.ClaimLock)
	cfg.BatchSize, cfg.ApplyConcurrency = 8, 8
	cfg.ApplyTimeout = 300 * time.Millisecond
	d, err := drainer.New(q.pool, cfg, drDecode, nil, drainer.WithTxApplier[drEvent](apply), drainer.WithLogger[drEvent](drLogger(t)))
	require.NoError(t, err)
	stop := drStart(t, d)
	defer stop()
	drWaitFor(t, 25*time.Second, "the four good rows sent", func() bool { return q.sent(t) == 4 })
	require.NoError(t, stop())
	// Linear: a loaded machine adds a call or two (a round cut short, a lost transaction's retry);
	// binary counting over five rows is 31.
	require.LessOrEqual(t, int(aloneCalls.Load()), 2*hanging+2,
		"each hanging row is called alone about once before the good rows are sent, not 2^k-1 times in all")
}

// A row's own call that fails with the database's or the setup's error (here 42501, as the relay's
// fan-out without the privilege to write a sink's queue) charges no row, as a batch's call does:
// the transaction is rolled back. Rows of a batch that ran out of its time are applied one at a
// time when they come back, and those calls classified every error as the row's: each charged an
// attempt for a privilege nobody granted.
func TestDrainerTxApplier_ASetupErrorOfARowAloneChargesNoRow(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	for i := range 3 {
		q.enqueue(t, "", "op", i)
	}
	var mended atomic.Bool
	var refusedAlone atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
		switch {
		case mended.Load():
			return nil
		case len(batch) > 1: // the batch's call hangs: its rows are applied one at a time from now on
			<-ctx.Done()
			return ctx.Err()
		}
		refusedAlone.Add(1)
		return fmt.Errorf("copying 1 event into public.sink: %w",
			&pgconn.PgError{Code: "42501", Message: "permission denied for table sink"})
	}
	cfg := q.config(drainer.ClaimLock)
	cfg.BatchSize, cfg.ApplyConcurrency = 8, 8
	cfg.ApplyTimeout = 300 * time.Millisecond
	d, err := drainer.New(q.pool, cfg, drDecode, nil, drainer.WithTxApplier[drEvent](apply), drainer.WithLogger[drEvent](drLogger(t)))
	require.NoError(t, err)
	stop := drStart(t, d)
	drWaitFor(t, 15*time.Second, "rows refused alone a few times", func() bool { return refusedAlone.Load() >= 3 })
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count > 0 OR sent_at IS NOT NULL`),
		"no attempt counted for the setup's error")
	mended.Store(true)
	drWaitFor(t, 15*time.Second, "every row sent once the setup is mended", func() bool { return q.sent(t) == 3 })
	require.NoError(t, stop())
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count > 0`))
}

// The TxApplier's paths run as a login that is only a member of pgdrain_worker (with INSERT on the
// application's own table, as a service would have): the batch, the savepoint a failed call rolls
// back, rows applied one at a time, a row's failure charged, a call that ran out of its time (its
// statement cancelled, so pgx's connection and the transaction are lost) charged at the next claim.
// Every earlier TxApplier test drained as the owner, whose privileges hide a missing grant.
func TestDrainerTxApplier_AsWorker_ChargesFailingAndHangingRowsAndSendsTheRest(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	ctx := context.Background()
	_, err := q.pool.Exec(ctx, `CREATE TABLE public.applied (id bigint);
		GRANT INSERT ON public.applied TO pgdrain_worker`)
	require.NoError(t, err)
	worker := loginPool(t, q.db, "pgdrain_worker")
	bad := q.enqueue(t, "bad", "op", 0)
	stuck := q.enqueue(t, "stuck", "op", 0)
	for i := range 8 {
		q.enqueue(t, fmt.Sprintf("k%d", i), "op", 0)
	}
	// The stuck row's first two calls hang; a hang in a call of the row alone is its own failure,
	// charged an attempt (at its next claim: the call lost the transaction), one in a batch's call
	// is not (which row hung is not known; the rows are then applied alone).
	var stuckCalls, aloneHangs atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
		for _, e := range batch {
			switch {
			case e.ID == bad:
				return errors.New("the sink refuses this row")
			case e.ID == stuck && stuckCalls.Add(1) <= 2:
				if len(batch) == 1 {
					aloneHangs.Add(1)
				}
				_, err := tx.Exec(ctx, `SELECT pg_sleep(60)`)
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO public.applied (id) VALUES ($1)`, e.ID); err != nil {
				return err
			}
		}
		return nil
	}
	cfg := q.config(drainer.ClaimLock)
	cfg.BatchSize, cfg.ApplyConcurrency = 10, 10
	cfg.ApplyTimeout = 300 * time.Millisecond
	logger, buf := drCapture(t)
	d, err := drainer.New(worker, cfg, drDecode, nil, drainer.WithTxApplier[drEvent](apply), drainer.WithLogger[drEvent](logger))
	require.NoError(t, err)
	stop := drStart(t, d)
	drWaitFor(t, 30*time.Second, "the good rows and, once it no longer hangs, the stuck row sent; the bad row charged", func() bool {
		return q.sent(t) == 9 &&
			q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND attempt_count >= 1`, bad) == 1
	})
	require.NoError(t, stop())

	require.EqualValues(t, 9, q.count(t, `SELECT count(*) FROM public.applied`), "each sent row written once")
	require.EqualValues(t, 9, q.count(t, `SELECT count(DISTINCT id) FROM public.applied`))
	require.Positive(t, aloneHangs.Load())
	require.EqualValues(t, aloneHangs.Load(), q.count(t, `SELECT attempt_count FROM public.events WHERE id = $1`, stuck),
		"the stuck row was charged once for each hang of its own call before it was sent")
	log := buf.String()
	require.NotContains(t, log, "permission denied")
	require.NotContains(t, log, "42501")
}
