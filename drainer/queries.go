package drainer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgdrain/pgdrain/internal/headsrebuild"
	"github.com/pgdrain/pgdrain/internal/sqlrule"
)

// Every statement the drainer sends is here (but LISTEN/UNLISTEN, in listen.go, and the gauge's
// outbox.heads_rebuild, in internal/headsrebuild, which the CLI, the console and the relay share).
// Each calls an outbox SQL function granted to pgdrain_worker (docs/security.md) or sets a setting
// of its own; the drainer reads and writes no table itself, so a login role that is only a member
// of pgdrain_worker can run it.

// sqlCreatedAtMicros and sqlOldestMicros read a row's created_at as integer microseconds since
// 1970, NULL as NULL, and a time outside years 1 to 9999 ('infinity' and '-infinity' too) as the
// nearest of those bounds: the range RFC 3339 and encoding/json can write, so a sink that puts the
// time in a message (the relay's webhook envelope, CloudEvents ce_time) can send it.
var (
	sqlCreatedAtMicros = `CASE WHEN c.created_at IS NOT NULL
		THEN (extract(epoch FROM ` + sqlrule.WithinYears1To9999("c.created_at") + `) * 1000000)::int8 END`
	sqlOldestMicros = `CASE WHEN oldest_pending_at IS NOT NULL
		THEN (extract(epoch FROM ` + sqlrule.WithinYears1To9999("oldest_pending_at") + `) * 1000000)::int8 END`
)

var (
	// Times and intervals come back as integer microseconds (extract(epoch ...) * 1000000): their
	// text depends on the session's DateStyle, IntervalStyle and TimeZone, and a pool whose
	// default_query_exec_mode is exec or simple_protocol (behind PgBouncer: docs/pgbouncer.md)
	// reads every result as text, which pgx parses only in the ISO and postgres styles. Under a role's DateStyle = 'SQL, DMY'
	// every claim failed to scan, after leasing its rows, for ever.
	sqlQueueInfo = `
		SELECT queue_name, coalesce(partition_column, ''), max_attempts,
		       (extract(epoch FROM backoff_min) * 1000000)::int8, (extract(epoch FROM backoff_max) * 1000000)::int8,
		       permanent_policy, channel
		FROM outbox.queue_info($1)`
	sqlCheckIndexes = `SELECT problem, coalesce(index_name, ''), detail FROM outbox.check_indexes($1)`
	// sqlNextDue is measured on the server's clock, so clock skew with this process does not matter.
	// A next attempt at '-infinity' (a plain INSERT may write it: the table bounds times ahead only)
	// makes next_due '-infinity', which can not be subtracted from a time ("cannot subtract infinite
	// timestamps": every wait failed): each end is read as seconds, and the difference is kept
	// between -1 (claim now) and about 31 years.
	sqlNextDue = `SELECT CASE WHEN d IS NOT NULL THEN LEAST(GREATEST(
		extract(epoch FROM d) - extract(epoch FROM pg_catalog.clock_timestamp()), -1), 1e9)::float8 END
		FROM outbox.next_due($1) AS d`
	// sqlDrainerWaits marks the drainer as waiting for a NOTIFY (queues that notify 'when_waiting').
	sqlDrainerWaits = `SELECT outbox.drainer_waits($1, $2::float8 * interval '1 second')`
	sqlDrainerWoke  = `SELECT outbox.drainer_woke($1, $2)`
	// sqlClaimTurn asks whether this drainer's paced claim may go now (0) or how long to wait.
	sqlClaimTurn = `SELECT extract(epoch FROM outbox.claim_turn($1, $2::float8 * interval '1 second'))::float8`
	// What every claim returns, as collectJobs reads it, around the lease token (NULL in lock
	// mode), from the claim's rows as c. The claims also return when the claim started, on the
	// server's clock, which is the clock of created_at: the pacing of a trickle (trickle.go)
	// compares the two.
	// created_at is the producer's to write: 'infinity', '-infinity' or a time near PostgreSQL's
	// limits does not fit int8 microseconds ("cannot convert infinity to bigint" failed every claim
	// that returned such a row, after leasing or locking it: the queue was delivered no more), and an
	// adopted table's may be NULL. It is read within years 1 to 9999 (sqlCreatedAtMicros), NULL as
	// NULL (Event.CreatedAt zero).
	sqlClaimedBeforeToken = `
		SELECT c.id, c.event_type, c.payload, coalesce(c.partition_key, ''), c.attempt_count,
		       ` + sqlCreatedAtMicros + `, `
	sqlClaimedAfterToken = `,
		       c.event_id::text, c.headers, (extract(epoch FROM pg_catalog.statement_timestamp()) * 1000000)::int8`
	sqlClaimBatch = sqlClaimedBeforeToken + `c.lease_token` + sqlClaimedAfterToken + `
		FROM outbox.claim_batch($1, $2, $3) AS c`
	sqlClaimRuns = sqlClaimedBeforeToken + `c.lease_token` + sqlClaimedAfterToken + `
		FROM outbox.claim_runs($1, $2, $3, $4) AS c`
	// The lock-mode claims also give their transaction the server's bound on idle time that the
	// drainer keeps itself (lockIdleBound): a role's shorter idle_in_transaction_session_timeout
	// would end every batch whose applies take longer, for ever, and with none set the server
	// would keep a batch whose client vanished (a partition) until TCP keepalive gave up.
	// set_config's is_local lasts until the transaction ends.
	sqlClaimLocked = sqlClaimedBeforeToken + `NULL::uuid` + sqlClaimedAfterToken + `
		FROM outbox.claim_locked($1, $2) AS c,
		     pg_catalog.set_config('idle_in_transaction_session_timeout', $3, true) AS s`
	sqlClaimLockedRuns = sqlClaimedBeforeToken + `NULL::uuid` + sqlClaimedAfterToken + `
		FROM outbox.claim_locked_runs($1, $2, $4) AS c,
		     pg_catalog.set_config('idle_in_transaction_session_timeout', $3, true) AS s`
	// Only whether the lease is still ours counts (the drainer keeps its deadline on its own clock).
	sqlExtendLease  = `SELECT outbox.extend_lease($1, $2, $3, $4) IS NOT NULL`
	sqlApplyResults = `SELECT id, applied FROM outbox.apply_results($1, $2, $3, $4, $5, $6)`
	// sqlApplyResultsAsync is sqlApplyResults in a transaction that commits without waiting for
	// its WAL flush (Config.AsyncResults): set_config's is_local lasts until that commit.
	sqlApplyResultsAsync = `SELECT r.id, r.applied FROM outbox.apply_results($1, $2, $3, $4, $5, $6) AS r,
		pg_catalog.set_config('synchronous_commit', 'off', true) AS s`
	sqlRelease      = `SELECT outbox.release($1, $2, $3)`
	sqlSettleLocked = `SELECT outbox.settle_locked($1, $2, $3, $4, $5)`
	// A settle that may be refused runs in a savepoint (querySettleLockedInSavepoint), so that the
	// claim transaction outlives the refusal.
	sqlSavepoint           = `SAVEPOINT pgdrain_settle`
	sqlReleaseSavepoint    = `RELEASE SAVEPOINT pgdrain_settle`
	sqlRollbackToSavepoint = `ROLLBACK TO SAVEPOINT pgdrain_settle`
	// A TxApplier call runs in a savepoint of its own (applyInSavepoint): a failed call is undone
	// and the transaction goes on. Plain SQL on tx, not tx.Begin: the TxApplier keeps getting the
	// same tx in every call of a transaction (the relay's fan-out keeps what it read per tx).
	sqlApplySavepoint           = `SAVEPOINT pgdrain_apply`
	sqlReleaseApplySavepoint    = `RELEASE SAVEPOINT pgdrain_apply`
	sqlRollbackToApplySavepoint = `ROLLBACK TO SAVEPOINT pgdrain_apply; RELEASE SAVEPOINT pgdrain_apply`

	sqlStats = `
		SELECT pending, poisoned, coalesce(extract(epoch FROM oldest_pending_age), 0)::float8
		FROM outbox.stats($1)`
	// oldest_pending_at is a row's created_at (see sqlClaimedBeforeToken); the age is kept within
	// about 285 years, which a time.Duration holds.
	sqlWedgedPartitions = `
		SELECT partition_key, head_id, head_attempt_count, coalesce(head_last_error, ''),
		       coalesce(` + sqlOldestMicros + `, 0),
		       pending, reason,
		       coalesce(LEAST(GREATEST(extract(epoch FROM now()) - extract(epoch FROM oldest_pending_at), -9e9), 9e9)::float8, 0)
		FROM outbox.wedged_partitions($1, $2, $3)`
	sqlRepair = `
		SELECT coalesce(partition_key, ''), head_id, cause, coalesce(detail, '')
		FROM outbox.repair($1, $2)`
)

// querier is what both a pool and a transaction offer.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// queryQueueInfo reads the queue's registration (outbox.queue_info). An unregistered queue is an
// error matching ErrQueueNotRegistered.
func queryQueueInfo(ctx context.Context, db querier, queue string) (registration, error) {
	var (
		r      registration
		policy string
	)
	var backoffMin, backoffMax int64
	err := db.QueryRow(ctx, sqlQueueInfo, queue).Scan(&r.queue, &r.partitionColumn, &r.maxAttempts,
		&backoffMin, &backoffMax, &policy, &r.channel)
	if err != nil {
		return r, translate("reading registration of queue "+queue, err)
	}
	r.backoffMin, r.backoffMax = time.Duration(backoffMin)*time.Microsecond, time.Duration(backoffMax)*time.Microsecond
	switch policy {
	case "poison":
		r.permanentPolicy = PoisonPermanent
	case "retry":
		r.permanentPolicy = RetryPermanent
	default:
		return r, fmt.Errorf("reading registration of queue %s: unknown permanent_policy %q", queue, policy)
	}
	return r, nil
}

// indexProblem is one row of outbox.check_indexes.
type indexProblem struct {
	problem, indexName, detail string
}

func queryIndexProblems(ctx context.Context, db querier, queue string) ([]indexProblem, error) {
	rows, err := db.Query(ctx, sqlCheckIndexes, queue)
	if err != nil {
		return nil, translate("checking indexes", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (indexProblem, error) {
		var p indexProblem
		err := row.Scan(&p.problem, &p.indexName, &p.detail)
		return p, err
	})
	if err != nil {
		return nil, translate("checking indexes", err)
	}
	return list, nil
}

// queryNextDue returns how long until the earliest lease or backoff that parks work on the queue
// ends (zero or negative: claim now), or nil when nothing is parked (outbox.next_due).
func queryNextDue(ctx context.Context, db querier, queue string) (*time.Duration, error) {
	var secs *float64
	if err := db.QueryRow(ctx, sqlNextDue, queue).Scan(&secs); err != nil {
		return nil, translate("reading the next wake-up time", err)
	}
	if secs == nil {
		return nil, nil
	}
	d := time.Duration(*secs * float64(time.Second))
	return &d, nil
}

// queryDrainerWaits says the drainer waits up to wait for a NOTIFY of queue: the mark
// (outbox.drainer_waits), 0 when the queue notifies always, nil when producers hold its notify gate.
func queryDrainerWaits(ctx context.Context, db querier, queue string, wait time.Duration) (*int64, error) {
	var mark *int64
	if err := db.QueryRow(ctx, sqlDrainerWaits, queue, wait.Seconds()).Scan(&mark); err != nil {
		return nil, translate("marking the drainer as waiting", err)
	}
	return mark, nil
}

// queryDrainerWoke clears the drainer's waiting mark after a NOTIFY woke it (outbox.drainer_woke).
func queryDrainerWoke(ctx context.Context, db querier, queue string, mark int64) error {
	if _, err := db.Exec(ctx, sqlDrainerWoke, queue, mark); err != nil {
		return translate("clearing the drainer's waiting mark", err)
	}
	return nil
}

// queryClaimTurn takes the queue's claim turn (outbox.claim_turn): 0 when this drainer may claim
// now, else how long to wait before asking again.
func queryClaimTurn(ctx context.Context, db querier, queue string, pause time.Duration) (time.Duration, error) {
	var secs float64
	if err := db.QueryRow(ctx, sqlClaimTurn, queue, pause.Seconds()).Scan(&secs); err != nil {
		return 0, translate("taking the claim turn", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// collectJobs scans the rows of either claim into jobs (the lease token is NULL in lock mode).
func collectJobs(rows pgx.Rows, queue string, deadline time.Time) ([]*job, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*job, error) {
		j := &job{deadline: deadline}
		j.event.Table = queue
		var createdAt *int64
		var claimStart int64
		err := row.Scan(&j.event.ID, &j.event.Type, &j.payload, &j.event.PartitionKey, &j.event.Attempts,
			&createdAt, &j.token, &j.event.EventID, &j.event.Headers, &claimStart)
		if createdAt != nil {
			j.event.CreatedAt = time.UnixMicro(*createdAt)
		}
		j.claimStart = time.UnixMicro(claimStart)
		return j, err
	})
}

// queryClaimBatch leases up to n rows, runs of up to run rows per partition, for lease
// (outbox.claim_batch, or claim_runs); each job's deadline is deadline.
func queryClaimBatch(ctx context.Context, db querier, queue string, n, run int, lease time.Duration, deadline time.Time) ([]*job, error) {
	sql, args := sqlClaimBatch, []any{queue, n, lease}
	if run > 1 {
		sql, args = sqlClaimRuns, append(args, run)
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, translate("claiming batch", err)
	}
	jobs, err := collectJobs(rows, queue, deadline)
	if err != nil {
		return nil, translate("claiming batch", err)
	}
	return jobs, nil
}

// queryClaimLocked locks up to n rows, runs of up to run rows per partition, in tx
// (outbox.claim_locked, or claim_locked_runs), and sets tx's idle_in_transaction_session_timeout
// to idleBound.
func queryClaimLocked(ctx context.Context, tx querier, queue string, n, run int, idleBound time.Duration) ([]*job, error) {
	sql, args := sqlClaimLocked, []any{queue, n, strconv.FormatInt(idleBound.Milliseconds(), 10)}
	if run > 1 {
		sql, args = sqlClaimLockedRuns, append(args, run)
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, translate("claiming batch", err)
	}
	jobs, err := collectJobs(rows, queue, time.Time{})
	if err != nil {
		return nil, translate("claiming batch", err)
	}
	return jobs, nil
}

// queryExtendLease extends j's lease (outbox.extend_lease): false when the lease is no longer ours.
func queryExtendLease(ctx context.Context, db querier, queue string, j *job, lease time.Duration) (bool, error) {
	var kept bool
	if err := db.QueryRow(ctx, sqlExtendLease, queue, j.event.ID, j.token, lease).Scan(&kept); err != nil {
		return false, translate("extending lease", err)
	}
	return kept, nil
}

// queryExtendLeases extends the leases of jobs in one round trip (outbox.extend_lease per row) and
// returns for each row whether its lease is still ours.
func queryExtendLeases(ctx context.Context, db querier, queue string, jobs []*job, lease time.Duration) ([]bool, error) {
	var b pgx.Batch
	for _, j := range jobs {
		b.Queue(sqlExtendLease, queue, j.event.ID, j.token, lease)
	}
	res := db.SendBatch(ctx, &b)
	out := make([]bool, len(jobs))
	for i := range jobs {
		if err := res.QueryRow().Scan(&out[i]); err != nil {
			_ = res.Close()
			return nil, translate("extending leases", err)
		}
	}
	if err := res.Close(); err != nil {
		return nil, translate("extending leases", err)
	}
	return out, nil
}

// queryApplyResults records the outcomes of jobs in one round trip (outbox.apply_results) and
// calls applied for each row with whether its result counted (false: the lease was lost); async:
// without waiting for the commit's WAL flush (Config.AsyncResults).
func queryApplyResults(ctx context.Context, db querier, queue string, jobs []*job, async bool,
	applied func(id int64, ok bool)) error {
	ids := make([]int64, len(jobs))
	tokens := make([]pgtype.UUID, len(jobs))
	outcomes := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i], tokens[i], outcomes[i] = j.event.ID, j.token, j.disposition.String()
	}
	sql := sqlApplyResults
	if async {
		sql = sqlApplyResultsAsync
	}
	rows, err := db.Query(ctx, sql, queue, ids, tokens, outcomes, textArray(jobs), retryAtArray(jobs))
	if err != nil {
		return translate("recording results", err)
	}
	var id int64
	var ok bool
	_, err = pgx.ForEachRow(rows, []any{&id, &ok}, func() error {
		applied(id, ok)
		return nil
	})
	if err != nil {
		return translate("recording results", err)
	}
	return nil
}

// queryRelease gives jobs back untouched, in one round trip (outbox.release per row).
func queryRelease(ctx context.Context, db querier, queue string, jobs []*job) error {
	var b pgx.Batch
	for _, j := range jobs {
		b.Queue(sqlRelease, queue, j.event.ID, j.token)
	}
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return translate("releasing rows", err)
	}
	return nil
}

// querySettleLocked records the outcomes of jobs in the claiming transaction tx
// (outbox.settle_locked) and returns how many rows it recorded.
func querySettleLocked(ctx context.Context, tx querier, queue string, jobs []*job) (int64, error) {
	var settled int64
	if err := tx.QueryRow(ctx, sqlSettleLocked, settleLockedArgs(queue, jobs)...).Scan(&settled); err != nil {
		return 0, translate("settling batch", err)
	}
	return settled, nil
}

// querySettleLockedInSavepoint is querySettleLocked in a savepoint of tx, sent in the same round
// trip. When the settle fails, the savepoint is rolled back and released, so tx goes on as if the
// settle had not run; when that fails too, the error says so and tx is lost.
func querySettleLockedInSavepoint(ctx context.Context, tx querier, queue string, jobs []*job) (int64, error) {
	var b pgx.Batch
	b.Queue(sqlSavepoint)
	b.Queue(sqlSettleLocked, settleLockedArgs(queue, jobs)...)
	b.Queue(sqlReleaseSavepoint)
	res := tx.SendBatch(ctx, &b)
	var settled int64
	_, err := res.Exec()
	if err == nil {
		err = res.QueryRow().Scan(&settled)
	}
	if err == nil {
		_, err = res.Exec()
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return settled, nil
	}
	err = translate("settling batch", err)
	// Both in one round trip, in the simple protocol (no arguments): a batch would prepare the
	// RELEASE first, which an aborted transaction refuses (it takes only ROLLBACK TO).
	if _, uerr := tx.Exec(ctx, sqlRollbackToSavepoint+"; "+sqlReleaseSavepoint); uerr != nil {
		return 0, fmt.Errorf("%w (after %v)", translate("rolling back to the settle's savepoint", uerr), err)
	}
	return 0, err
}

// settleLockedArgs are the arguments of sqlSettleLocked for jobs.
func settleLockedArgs(queue string, jobs []*job) []any {
	ids := make([]int64, len(jobs))
	outcomes := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i], outcomes[i] = j.event.ID, j.disposition.String()
	}
	return []any{queue, ids, outcomes, textArray(jobs), retryAtArray(jobs)}
}

// queueStats is the part of outbox.stats the gauges export.
type queueStats struct {
	pending, poisoned int64
	oldestAgeSeconds  float64
}

func queryStats(ctx context.Context, db querier, queue string) (queueStats, error) {
	var s queueStats
	if err := db.QueryRow(ctx, sqlStats, queue).Scan(&s.pending, &s.poisoned, &s.oldestAgeSeconds); err != nil {
		return s, translate("reading outbox.stats", err)
	}
	return s, nil
}

// queryHeadsRebuilding reports whether claims are rebuilding the queue's partition heads
// (outbox.heads_rebuild). known is false when the database can not say (a schema before migration
// 00051, which has no such function): the gauge is left out rather than the scrape failing.
func queryHeadsRebuilding(ctx context.Context, db querier, queue string) (rebuilding, known bool, err error) {
	p, known, err := headsrebuild.Read(ctx, db, queue)
	if err != nil {
		return false, false, translate("reading outbox.heads_rebuild", err)
	}
	return p != nil, known, nil
}

// queryWedgedPartitions returns the limit oldest partitions stuck longer than olderThan
// (outbox.wedged_partitions).
func queryWedgedPartitions(ctx context.Context, db querier, queue string, olderThan time.Duration, limit int) ([]WedgedPartition, error) {
	rows, err := db.Query(ctx, sqlWedgedPartitions, queue, olderThan, limit)
	if err != nil {
		return nil, translate("reading wedged partitions", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (WedgedPartition, error) {
		w := WedgedPartition{Table: queue}
		var age float64
		var oldest int64
		err := row.Scan(&w.PartitionKey, &w.HeadID, &w.HeadAttempts, &w.HeadLastError, &oldest,
			&w.Pending, &w.Reason, &age)
		w.OldestPendingAt, w.Age = time.UnixMicro(oldest), time.Duration(age*float64(time.Second))
		return w, err
	})
	if err != nil {
		return nil, translate("reading wedged partitions", err)
	}
	return list, nil
}

// repairRow is one problem outbox.repair found (and, unless dry run, fixed).
type repairRow struct {
	partitionKey string // "" when the problem is not one partition's
	headID       *int64
	cause        string
	detail       string
}

// queryRepair runs outbox.repair: every pending deliverable row no claim could reach, one row per
// problem, fixed unless dryRun. No rows: healthy, or another session is repairing the queue.
func queryRepair(ctx context.Context, db querier, queue string, dryRun bool) ([]repairRow, error) {
	rows, err := db.Query(ctx, sqlRepair, queue, dryRun)
	if err != nil {
		return nil, translate("repairing derived state", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (repairRow, error) {
		var r repairRow
		err := row.Scan(&r.partitionKey, &r.headID, &r.cause, &r.detail)
		return r, err
	})
	if err != nil {
		return nil, translate("repairing derived state", err)
	}
	return list, nil
}
