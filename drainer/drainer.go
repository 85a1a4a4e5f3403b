package drainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgdrain/pgdrain/internal/pgerr"
	"github.com/pgdrain/pgdrain/internal/readcommitted"
	"github.com/pgdrain/pgdrain/internal/retrylog"
	"github.com/pgdrain/pgdrain/internal/version"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Applier delivers one event to its peer. It must be idempotent (delivery is at least once) and,
// when ApplyConcurrency > 1, safe for concurrent use. Its ctx ends at min(ApplyTimeout, lease end
// - LeaseMargin) (in lock mode: LeaseMargin before the batch's LockTransactionTimeout) and is not
// cancelled by Run's ctx; an Applier that ignores it keeps its apply slot but not shutdown, and
// its result is then dropped. A nil error records the row as sent; an error is transient unless
// marked with Permanent. A panic (also one in the returned error's methods) and runtime.Goexit are
// recorded as permanent.
type Applier[T any] func(ctx context.Context, eventType string, payload T) error

// Decoder turns a row's jsonb payload into T. A decoding error is permanent: the payload will
// never decode.
type Decoder[T any] func(payload []byte) (T, error)

// Option configures a Drainer in New.
type Option[T any] func(*Drainer[T])

// WedgedPartition is a partition whose oldest pending row is older than Config.WedgeWarnAfter.
type WedgedPartition struct {
	// Table is the queue.
	Table string
	// PartitionKey is the key (an id-based handle, reported on purpose for attribution).
	PartitionKey string
	// HeadID is the partition's first deliverable row, the one its successors wait for.
	HeadID int64
	// HeadAttempts is the head's attempt_count.
	HeadAttempts int
	// HeadLastError is the head's last recorded error ("" if none).
	HeadLastError string
	// OldestPendingAt is when the oldest pending row of the partition was created.
	OldestPendingAt time.Time
	// Age is how long the oldest pending row has waited.
	Age time.Duration
	// Pending is how many deliverable rows the partition holds.
	Pending int64
	// Reason says why the head is not moving (leased, backing off, waiting for a drainer).
	Reason string
}

// wedgeReportLimit is how many of the oldest wedged partitions one report carries: the observer
// is for attribution, and a peer outage wedges every partition at once.
const wedgeReportLimit = 10

// WithLogger sets the logger (default slog.Default()).
func WithLogger[T any](logger *slog.Logger) Option[T] {
	return func(d *Drainer[T]) {
		if logger != nil {
			d.logger = logger
		}
	}
}

// WithWedgeObserver registers fn to receive, at most once per Config.WedgeWarnAfter, the oldest
// (at most 10) partitions stuck longer than WedgeWarnAfter. It only runs on a partitioned queue
// with WedgeWarnAfter > 0. fn runs on the drainer's watcher goroutine and should return quickly.
func WithWedgeObserver[T any](fn func(ctx context.Context, wedged []WedgedPartition)) Option[T] {
	return func(d *Drainer[T]) { d.wedgeObserver = fn }
}

// WithListenPool makes the drainer LISTEN over a connection acquired (and hijacked) from pool
// instead of its own. Behind a transaction pooler (PgBouncer's pool_mode=transaction) a LISTEN
// never hears a NOTIFY, because the server connection it ran on goes back to the pooler's pool
// after the statement: pass New the pool that goes through the pooler, and this option a small
// pool (MaxConns 1 is enough) that connects to PostgreSQL directly (docs/pgbouncer.md). The
// drainers of a process that share a listen pool share its one LISTEN connection. Without it,
// or Config.PollOnly, the drainer LISTENs on a connection of its own pool, and warns when that
// connection goes through a pooler. A nil pool keeps the default.
func WithListenPool[T any](pool *pgxpool.Pool) Option[T] {
	return func(d *Drainer[T]) { d.listenPool = pool }
}

// WithMetrics exports the drainer's metrics through reg while Run runs: from the start of Run
// (once the queue's registration is read) until Run returns, when they are unregistered again, so
// a drainer can be run again, or built again, with the same reg. All drainers of a process that
// share reg share one collector: each queue's series exist once however many of its drainers run,
// and the counters add up what all of them did.
//
// Counters (sum them across processes): pgdrain_outbox_results_total{queue,outcome},
// pgdrain_outbox_lease_lost_total{queue}, pgdrain_outbox_claim_duration_seconds{queue,mode} and
// pgdrain_repairs_total{queue,cause} (problems the repair pass fixed; any increase is a bug worth
// reporting). Table-wide gauges, read at scrape time by one outbox.stats call per queue (bounded
// by 5s): pgdrain_outbox_backlog_depth, pgdrain_outbox_oldest_pending_age_seconds and
// pgdrain_outbox_poisoned{queue}; and pgdrain_outbox_heads_rebuilding{queue}, 1 while claims
// rebuild the partition heads after a crash (outbox.heads_rebuild, migration 00051; left out on
// an older schema). Every process draining a queue reports the same table-wide
// value, so aggregate those across processes with max by (queue), never sum.
func WithMetrics[T any](reg prometheus.Registerer) Option[T] {
	return func(d *Drainer[T]) { d.registerer = reg }
}

// Drainer claims rows of one queue, applies them with an Applier and records the results, all
// through the outbox SQL functions. Run it on as many replicas as you like.
type Drainer[T any] struct {
	pool          *pgxpool.Pool
	db            *readcommitted.DB // pool, for pgdrain's statements: READ COMMITTED whatever its default
	listenPool    *pgxpool.Pool     // WithListenPool's, nil: LISTEN on pool
	cfg           Config            // as given
	table         string            // canonical "schema.table"
	decode        Decoder[T]
	apply         Applier[T]
	logger        *slog.Logger // with the queue's name
	baseLogger    *slog.Logger // as given, for the LISTEN connection its pool's drainers share
	wedgeObserver func(context.Context, []WedgedPartition)
	registerer    prometheus.Registerer
	tracer        trace.Tracer // WithTracerProvider's; nil: no spans
	txApply       TxApplier    // WithTxApplier's; nil: apply each row with apply
	running       atomic.Bool
	// inflight holds the rows whose apply runs, across Runs (an apply that ignores its context
	// outlives its batch, its lease and its Run).
	inflight *inFlight
	// txOverrun is closed when a TxApplier call that its batch gave up on returns; nil when none
	// runs. Only the running Run's lock loop touches it.
	txOverrun chan struct{}
	health    health // what the running (or last) Run saw of the database: Health
	retries   retrylog.Log
}

// New returns a Drainer for cfg.Table. It validates cfg but does not touch the database: Run
// checks the queue's registration. apply may be nil with WithTxApplier, which applies whole
// lock-mode batches instead.
func New[T any](pool *pgxpool.Pool, cfg Config, decode Decoder[T], apply Applier[T], opts ...Option[T]) (*Drainer[T], error) {
	if pool == nil {
		return nil, errors.New("pool must not be nil")
	}
	if decode == nil {
		return nil, errors.New("decode must not be nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Drainer[T]{
		pool:     pool,
		db:       readcommitted.New(pool),
		cfg:      cfg,
		table:    canonicalTable(cfg.Table),
		decode:   decode,
		apply:    apply,
		logger:   slog.Default(),
		inflight: newInFlight(),
	}
	for _, o := range opts {
		o(d)
	}
	switch {
	case d.txApply != nil && cfg.ClaimMode != ClaimLock:
		return nil, errTxApplierNeedsLock
	case d.txApply == nil && apply == nil:
		return nil, errors.New("apply must not be nil (unless WithTxApplier is given)")
	}
	if d.listenPool != nil && cfg.PollOnly {
		return nil, errors.New("WithListenPool and Config.PollOnly exclude each other: PollOnly turns LISTEN off")
	}
	d.baseLogger = d.logger
	d.logger = d.logger.With("table", d.table)
	return d, nil
}

// Run drains the queue until ctx is cancelled. It first checks that the database's outbox schema is
// at migration OutboxMigrationNeeded or later (outbox.version(): an older schema, or none, is an
// error matching ErrSchemaTooOld that says which migrations to run), then reads the queue's registration
// (outbox.queue_info: an unregistered queue is an error matching ErrQueueNotRegistered) and checks
// the Config's Expect fields against it (a disagreement is an error matching
// ErrRegistrationMismatch that names every disagreeing field), logs check_indexes findings as
// warnings, and joins the LISTEN connection its listen pool's drainers share (WithListenPool; none
// with Config.PollOnly). Then it claims on every NOTIFY (unless PollOnly), every PollFallback, as
// soon as the earliest backoff or lease of the queue ends (outbox.next_due), whenever there is room
// after a claim that found rows, after recording results, and after a repair pass
// (Config.RepairInterval) that fixed something.
//
// In lease mode it is a continuous pipeline: a free apply slot takes the next claimed row at once,
// more rows are claimed as slots free, and results are recorded as applies finish (batched), so
// one slow apply holds only its own slot. On cancellation, claimed rows not yet started are
// released, applies in flight get ApplyTimeout to finish and are recorded, and Run returns nil; an
// apply that ignores its context does not hold Run longer than that (its row is delivered again).
// In lock mode each batch is one claim transaction bounded by LockTransactionTimeout; on
// cancellation no apply starts, those in flight get ApplyTimeout, the finished ones are settled and
// the rest are left untouched by the COMMIT.
//
// While the database is unavailable (restarting, failing over, a standby not yet promoted:
// connection errors, SQLSTATE 57P01, 57P02, 57P03, 57P05, 25006, a call past its deadline) Run waits and
// retries with backoff, at start too, logging at Warn; see docs/failover.md. Every database call
// has a deadline (ClaimTimeout for claims, next_due, result flushes and releases), so a dead
// connection is abandoned; a lease-mode result flush that failed that way is retried while the
// results' leases last. Other errors at start (authentication, a
// missing queue) are returned, and so is an error matching ctx's (errors.Is(err,
// context.Canceled)) when ctx ends before the database let the drainer start. Database errors while draining are logged and retried. Every statement calls an outbox function
// granted to pgdrain_worker, so that role is all the drainer's login role needs.
//
// A pool closed under Run (pool.Close before Run returned) is the exception: no call can reach the
// database through it again, so the first claim or next_due call that meets it (at once while rows
// flow; when idle, at the next NOTIFY, backoff or lease end, or PollFallback) stops claiming, Run
// shuts down as on cancellation and returns an error matching ErrPoolClosed. In lock mode Close
// waits for the batch in flight, which commits as usual; in lease mode the results and releases
// that can no longer reach the database are dropped (logged), and their rows are delivered again
// when their leases end. A pool already closed when Run starts is the same error, at once.
func (d *Drainer[T]) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer d.running.Store(false)
	d.health.reset()
	reg, err := d.connect(ctx)
	if err != nil {
		return err
	}
	if err := checkExpectations(d.cfg, reg); err != nil {
		return err
	}
	d.logIndexFindings(ctx)
	// Deferred before the LISTEN subscription and the background goroutines, so it runs after
	// them and after the shutdown that records the last results: nothing counts into the series
	// once they are removed.
	m, leaveMetrics, err := joinMetrics(d.registerer, reg.queue, d.pool, d.logger)
	if err != nil {
		return err
	}
	defer leaveMetrics()

	r := &runner[T]{d: d, cfg: d.cfg.withDefaults(), reg: reg, wake: make(chan struct{}, 1), runCtx: ctx, metrics: m, timedOut: timedOut{}}
	ready := closedChan
	if !r.cfg.PollOnly {
		r.sub = d.subscribe(reg.channel, r.listenWake)
		defer r.sub.close()
		ready = r.sub.ready
	}
	bgCtx, stopBackground := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopBackground()
		wg.Wait()
	}()
	if r.wedgeWatchEnabled() {
		wg.Go(func() { r.watchWedges(bgCtx) })
	}
	if r.cfg.RepairInterval > 0 {
		wg.Go(func() { r.watchRepairs(bgCtx) })
	}
	// Claim only once LISTEN is in place (or has failed once), so no NOTIFY falls in between.
	select {
	case <-ready:
	case <-ctx.Done():
		return nil
	}
	return r.drain(ctx)
}

// closedChan is ready at once: a PollOnly drainer waits for no LISTEN.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// subscribe joins the LISTEN connection of the listen pool (WithListenPool's, or the drainer's
// own pool, which is then checked for a pooler in between).
func (d *Drainer[T]) subscribe(channel string, wake func(notified bool)) *subscription {
	if d.listenPool != nil {
		return subscribe(d.listenPool, channel, wake, d.baseLogger, false)
	}
	return subscribe(d.pool, channel, wake, d.baseLogger, true)
}

// logIndexFindings logs what outbox.check_indexes reports: a missing or extra (decoy) index
// turns the claim into a scan of the backlog. A failed check is logged and does not stop Run.
func (d *Drainer[T]) logIndexFindings(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.withDefaults().ClaimTimeout)
	defer cancel()
	problems, err := queryIndexProblems(cctx, d.pool, d.table)
	if err != nil {
		d.logger.WarnContext(ctx, "checking the queue's indexes failed; draining anyway", "err", err)
		return
	}
	for _, p := range problems {
		d.logger.WarnContext(ctx, "queue index problem: claims may scan the whole backlog",
			"problem", p.problem, "index", p.indexName, "detail", p.detail)
	}
}

// stoppedBeforeStart is Run's error when its ctx ended before the database let it start (down,
// failing over): it matches ctx's error (errors.Is(err, context.Canceled) for a stop), and says
// what the last attempt met.
func stoppedBeforeStart(ctx context.Context, last error) error {
	return fmt.Errorf("stopped before the drainer could start: %w (last attempt: %w)", context.Cause(ctx), last)
}

// connect pings the database, checks that its outbox schema is at least OutboxMigrationNeeded
// (outbox.version(); an older one is an error matching ErrSchemaTooOld) and reads the queue's
// registration (outbox.queue_info), retrying with
// backoff while the database is unavailable (see unavailable): a drainer that starts during a
// failover waits for the new primary rather than failing. Any other error is returned at once;
// when ctx ends first, an error matching ctx's (stoppedBeforeStart).
func (d *Drainer[T]) connect(ctx context.Context) (registration, error) {
	delay := errorDelayMin
	bound := d.cfg.withDefaults().ClaimTimeout
	for {
		var reg registration
		var schema version.Schema
		// Each attempt is bounded (ClaimTimeout): a host that never answers is waited for, with
		// backoff, instead of hanging the first attempt forever.
		actx, cancel := context.WithTimeout(ctx, bound)
		// Ping, the schema's version (an old schema is not "unavailable": it is returned at once
		// below), then the registration.
		err := d.pool.Ping(actx)
		var level string
		if err != nil {
			err = fmt.Errorf("pinging database: %w", err)
		} else if level, err = d.db.Check(actx); err != nil {
			err = translate("checking the isolation level", err)
		} else if schema, err = version.CheckSchema(actx, d.pool, "outbox", OutboxMigrationNeeded, "this drainer"); err != nil {
			if !errors.Is(err, ErrSchemaTooOld) {
				err = translate("checking the schema", err)
			}
		} else if reg, err = loadRegistration(actx, d.pool, d.table); err == nil {
			cancel()
			if schema.LacksSecurityFix() {
				d.logger.Warn(schema.SecurityAdvice(), "queue", d.table)
			}
			if d.db.Explicit() {
				d.logger.Info("the pool's connections begin transactions in "+level+
					" (default_transaction_isolation): the drainer runs each statement in a READ COMMITTED transaction of its own,"+
					" two more round trips each; set default_transaction_isolation = 'read committed' for the drainer's role to save them",
					"default_transaction_isolation", level)
			}
			return reg, nil
		}
		cancel()
		if ctx.Err() != nil {
			return registration{}, stoppedBeforeStart(ctx, err)
		}
		if closed := poolClosed(err); closed != nil {
			return registration{}, closed
		}
		if pgerr.Passing(err) == "" {
			return registration{}, err
		}
		d.logRetry(ctx, "starting failed; retrying", err, delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return registration{}, stoppedBeforeStart(ctx, err)
		case <-t.C:
		}
		delay = min(2*delay, errorDelayMax)
	}
}
