package console

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/console/timetext"
	"github.com/pgdrain/pgdrain/internal/headsrebuild"
	"github.com/pgdrain/pgdrain/internal/sqlrule"
)

// Every statement the console sends is in this file (but outbox.heads_rebuild's, in
// internal/headsrebuild, which the drainer, the CLI and the relay share). Pages read through existing SQL functions
// where one exists (outbox.stats, outbox.wedged_partitions) and otherwise through bounded,
// index-backed queries; actions call exactly the functions the CLI calls.

// queueReg is one registered queue, from outbox.queues.
type queueReg struct {
	Name            string
	TableOID        uint32
	Table           string // the table as regclass text, quoted as needed
	PartitionColumn *string
	PartitionType   *string
	MaxAttempts     int
	// Gone: no table has TableOID any more (dropped outside outbox.drop_queue; the registration stays
	// until create_queue or drop_queue). Nothing can be read of it or done to it: every function of
	// the queue fails with 42P01.
	Gone bool
}

// listQueues reads the registry, and whether each queue's table still exists (pg_class by oid, as
// outbox._queue checks it).
func listQueues(ctx context.Context, db *pgxpool.Pool) ([]queueReg, error) {
	rows, err := db.Query(ctx, `
		SELECT q.queue, q.table_oid::oid,
		       CASE WHEN c.oid IS NULL THEN q.table_oid::oid::text ELSE pg_catalog.format('%I.%I', n.nspname, c.relname) END,
		       q.partition_column, q.partition_type, q.max_attempts, c.oid IS NULL
		FROM outbox.queues q
		LEFT JOIN pg_catalog.pg_class c ON c.oid = q.table_oid::oid
		LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		ORDER BY q.queue`)
	if err != nil {
		return nil, fmt.Errorf("reading outbox.queues: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (queueReg, error) {
		var q queueReg
		err := r.Scan(&q.Name, &q.TableOID, &q.Table, &q.PartitionColumn, &q.PartitionType, &q.MaxAttempts, &q.Gone)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading outbox.queues: %w", err)
	}
	return list, nil
}

// Stats is one row of outbox.stats.
type Stats struct {
	Pending, Ready, Leased, BackingOff, Poisoned int64
	OldestPendingAt                              *time.Time
	OldestPendingAge                             *time.Duration
}

// readStats calls outbox.stats and reads the table's cumulative insert counter
// (pg_stat_get_tuples_inserted, executable by every role, one shared-memory lookup) in the same
// round trip: the sampler derives throughput from successive pairs.
func readStats(ctx context.Context, db *pgxpool.Pool, q queueReg) (Stats, int64, error) {
	var s Stats
	var ageSeconds *float64
	var inserted int64
	err := db.QueryRow(ctx, `
		SELECT s.pending, s.ready, s.leased, s.backing_off, s.poisoned, s.oldest_pending_at,
		       extract(epoch FROM s.oldest_pending_age)::float8, pg_catalog.pg_stat_get_tuples_inserted($2::oid)
		FROM outbox.stats($1) s`, q.Name, q.TableOID).
		Scan(&s.Pending, &s.Ready, &s.Leased, &s.BackingOff, &s.Poisoned, &s.OldestPendingAt, &ageSeconds, &inserted)
	if err != nil {
		return Stats{}, 0, fmt.Errorf("reading outbox.stats(%s): %w", q.Name, err)
	}
	if ageSeconds != nil {
		d := time.Duration(*ageSeconds * float64(time.Second))
		s.OldestPendingAge = &d
	}
	return s, inserted, nil
}

// Wedged is one row of outbox.wedged_partitions.
type Wedged struct {
	PartitionKey     string
	HeadID           int64
	HeadAttemptCount int
	HeadLastError    *string
	OldestPendingAt  time.Time
	Pending          int64
	Reason           string
	// Leased: the head is held by a lease (an operator may end it, outbox.release_lease), until
	// LeasedUntil.
	Leased      bool
	LeasedUntil *time.Time
	// RetryAt is when a head that is backing off is due again.
	RetryAt *time.Time
}

// oldest_pending_at (readWedged) and created_at (readPoisoned) are a row's created_at, the producer's
// to write: 'infinity' (or NULL, on an adopted table) failed the whole page in the scan; a time
// outside years 1 to 9999 is shown at the nearer bound.
func readWedged(ctx context.Context, db *pgxpool.Pool, queue string, olderThan time.Duration) ([]Wedged, error) {
	rows, err := db.Query(ctx, `
		SELECT w.partition_key, w.head_id, w.head_attempt_count, w.head_last_error,
		       `+sqlrule.WithinYears1To9999("w.oldest_pending_at")+`, w.pending, w.reason
		FROM outbox.wedged_partitions($1, $2::interval, $3) w`, queue, olderThan, listLimit)
	if err != nil {
		return nil, fmt.Errorf("reading outbox.wedged_partitions(%s): %w", queue, err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Wedged, error) {
		var w Wedged
		err := r.Scan(&w.PartitionKey, &w.HeadID, &w.HeadAttemptCount, &w.HeadLastError, &w.OldestPendingAt, &w.Pending, &w.Reason)
		w.Leased = strings.HasPrefix(w.Reason, "leased")
		if at, ok := timetext.First(w.Reason); ok {
			switch {
			case w.Leased:
				w.LeasedUntil = &at
			case strings.HasPrefix(w.Reason, "backing off"):
				w.RetryAt = &at
			}
		}
		w.Reason = timetext.Rewrite(w.Reason)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading outbox.wedged_partitions(%s): %w", queue, err)
	}
	return list, nil
}

// HeadsRebuild says that claims are rebuilding a partitioned queue's partition heads after a crash,
// a standby's promotion or a restore without the unlogged tables' data, each claim one part of the
// keys in their order (outbox.heads_rebuild, 00051). Through is the last key a part has done, nil
// before the first part.
type HeadsRebuild = headsrebuild.Progress

// readHeadsRebuild asks outbox.heads_rebuild (granted to pgdrain_reader) whether claims are
// rebuilding the heads of a partitioned queue: nil when they are not, and when it can not be known
// here (headsrebuild.Read: a schema before 00051, a hot standby).
func readHeadsRebuild(ctx context.Context, db *pgxpool.Pool, queue string) (*HeadsRebuild, error) {
	p, _, err := headsrebuild.Read(ctx, db, queue)
	if err != nil {
		return nil, fmt.Errorf("reading outbox.heads_rebuild(%s): %w", queue, err)
	}
	return p, nil
}

// Poisoned is one poisoned row as the queue page lists it.
type Poisoned struct {
	ID           int64
	PartitionKey *string
	AttemptCount int
	LastError    *string
	CreatedAt    time.Time
	// Payload is the first 200 characters of the payload as JSON text (outbox.poisoned_rows), or
	// nil when the reader's login may not select the payload column. The template escapes it.
	Payload *string
}

// payloadVisible says whether the reader's login may select the queue table's payload column:
// outbox.poisoned_rows gives a preview only then, and the page says why when it does not.
func payloadVisible(ctx context.Context, db *pgxpool.Pool, q queueReg) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT pg_catalog.has_column_privilege(session_user, $1::oid, 'payload', 'SELECT')`,
		q.TableOID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("checking privileges on %s: %w", q.Table, err)
	}
	return ok, nil
}

// readPoisoned lists the newest poisoned rows through outbox.poisoned_rows (granted to
// pgdrain_reader and pgdrain_operator): a bounded page through the claim index, so the cost
// follows the rows shown, not the backlog; the payload preview only for a login that may read it.
func readPoisoned(ctx context.Context, db *pgxpool.Pool, q queueReg) ([]Poisoned, error) {
	rows, err := db.Query(ctx, `
		SELECT p.id, p.partition_key, p.attempt_count, p.last_error,
		       `+sqlrule.WithinYears1To9999("p.created_at")+`, p.payload_preview
		FROM outbox.poisoned_rows($1, $2) p`, q.Name, listLimit)
	if err != nil {
		return nil, fmt.Errorf("reading poisoned rows of %s: %w", q.Name, err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Poisoned, error) {
		var p Poisoned
		err := r.Scan(&p.ID, &p.PartitionKey, &p.AttemptCount, &p.LastError, &p.CreatedAt, &p.Payload)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading poisoned rows of %s: %w", q.Name, err)
	}
	return list, nil
}

// maxKeyRequeue bounds "requeue all of a key": the ids are read first (and shown in the
// confirmation), then handed to outbox.requeue_poisoned.
const maxKeyRequeue = 10000

// poisonedIDsOfKey reads the poisoned ids of one key through the partition index (key, id)
// WHERE sent_at IS NULL. The key is compared in the column's own type so that the index applies.
// db is the operator's pool: the action's login is the one granted SELECT (id, <partition column>,
// attempt_count, sent_at) on the queue table (docs/security.md, "The console").
func poisonedIDsOfKey(ctx context.Context, db *pgxpool.Pool, q queueReg, key string) ([]int64, error) {
	if q.PartitionColumn == nil || q.PartitionType == nil {
		return nil, fmt.Errorf("queue %s has no partition column", q.Name)
	}
	// partition_type is written by create_queue (format_type of the column) into a registry only
	// the schema's owner may write; it is a type name, cast to regtype first as a check.
	var typ string
	if err := db.QueryRow(ctx, `SELECT $1::regtype::text`, *q.PartitionType).Scan(&typ); err != nil {
		return nil, fmt.Errorf("reading the partition type of %s: %w", q.Name, err)
	}
	return poisonedIDsWhere(ctx, db, q, fmt.Sprintf("CAST($1::text AS %s)", typ), key, "key "+shortKey(key))
}

// keyOfRow reads the key of row id (any state: its key never changes) as text, through the
// operator's login (the same columns as poisonedIDsOfKey); found is false when no row has that id.
// "Requeue all of a key" names the key by a row of it: a key may be far longer than an action's form
// (docs/sql-api.md: it must fit a btree entry after compression).
func keyOfRow(ctx context.Context, db *pgxpool.Pool, q queueReg, id int64) (key string, found bool, err error) {
	if q.PartitionColumn == nil {
		return "", false, fmt.Errorf("queue %s has no partition column", q.Name)
	}
	err = db.QueryRow(ctx, fmt.Sprintf(`SELECT t.%s::text FROM %s t WHERE t.id = $1`,
		pgx.Identifier{*q.PartitionColumn}.Sanitize(), q.Table), id).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading the key of row %d of %s: %w", id, q.Name, err)
	}
	return key, true, nil
}

// poisonedIDsOfKeyOfRow is poisonedIDsOfKey for the key of row id, compared in the database with
// the row's own value (no round trip of the key through text).
func poisonedIDsOfKeyOfRow(ctx context.Context, db *pgxpool.Pool, q queueReg, id int64) ([]int64, error) {
	if q.PartitionColumn == nil {
		return nil, fmt.Errorf("queue %s has no partition column", q.Name)
	}
	return poisonedIDsWhere(ctx, db, q, fmt.Sprintf("(SELECT r.%s FROM %s r WHERE r.id = $1)",
		pgx.Identifier{*q.PartitionColumn}.Sanitize(), q.Table), id, fmt.Sprintf("the key of row %d", id))
}

// poisonedIDsWhere reads the poisoned ids of the key keyExpr ($1 = arg) names, at most maxKeyRequeue.
func poisonedIDsWhere(ctx context.Context, db *pgxpool.Pool, q queueReg, keyExpr string, arg any, what string) ([]int64, error) {
	rows, err := db.Query(ctx, fmt.Sprintf(`
		SELECT t.id FROM %s t
		WHERE t.%s = %s AND t.sent_at IS NULL AND t.attempt_count >= $2
		ORDER BY t.id LIMIT $3`, q.Table, pgx.Identifier{*q.PartitionColumn}.Sanitize(), keyExpr),
		arg, q.MaxAttempts, maxKeyRequeue)
	if err != nil {
		return nil, fmt.Errorf("reading poisoned rows of %s in %s: %w", what, q.Name, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("reading poisoned rows of %s in %s: %w", what, q.Name, err)
	}
	return ids, nil
}

// keyShown is how many characters of a partition key the pages show (shortKey).
const keyShown = 80

// shortKey is a key as the pages show it: whole up to keyShown characters, else its first ones and
// its length. A valid key may be hundreds of kB (docs/sql-api.md), and the pages repeat keys.
func shortKey(key string) string {
	n := utf8.RuneCountInString(key)
	if n <= keyShown {
		return key
	}
	i := 0
	for k := range key {
		if i == keyShown {
			return fmt.Sprintf("%s… (%d characters)", key[:k], n)
		}
		i++
	}
	return key
}

// Ladder is one running escalation: its alert, its policy's steps and where it stands.
type Ladder struct {
	EscalationID string
	AlertID      string
	AlertName    string
	AlertState   string
	AlertSince   time.Time
	Policy       string
	StepIdx      int
	NextAt       *time.Time
	LeasedUntil  *time.Time
	Steps        []LadderStep
	// Overdue: the next step is due and will not be delivered soon: no engine is connected, or it
	// has been due for longer than the console's WedgedAfter without an engine holding it. Late is
	// how long it has been due.
	Overdue bool
	Late    time.Duration
	// LeaseLapsed: an engine took the step, its lease ended, and the step is still not recorded
	// (the engine stopped or lost its database before it could).
	LeaseLapsed bool
}

// LadderStep is one step of a ladder's policy, with what the journal says about it.
type LadderStep struct {
	Idx       int
	Delay     time.Duration
	Channel   string
	Target    string
	Current   bool   // the next step to deliver
	Journaled string // "delivered", "failed" or "" (latest journal row for this step)
}

// alrInstalled reports whether module alr is migrated in this database.
func alrInstalled(ctx context.Context, db *pgxpool.Pool) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT pg_catalog.to_regclass('alr.alert_escalations') IS NOT NULL`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("looking for schema alr: %w", err)
	}
	return ok, nil
}

// readLadders lists the running ladders in next_at order through the index alert_escalations_due
// (next_at) WHERE stopped_at IS NULL, at most listLimit of them, then their policies' steps
// (primary key) and journal rows (index delivery_journal_step).
func readLadders(ctx context.Context, db *pgxpool.Pool) ([]Ladder, error) {
	rows, err := db.Query(ctx, `
		SELECT e.id::text, a.id::text, a.name, a.state, a.created_at, p.name, e.step_idx, e.next_at, e.leased_until,
		       e.policy_id::text
		FROM alr.alert_escalations e
		JOIN alr.alerts a ON a.id = e.alert_id
		JOIN alr.escalation_policies p ON p.id = e.policy_id
		WHERE e.stopped_at IS NULL
		ORDER BY e.next_at, e.id LIMIT $1`, listLimit)
	if err != nil {
		return nil, fmt.Errorf("reading running ladders: %w", err)
	}
	var policies []string
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Ladder, error) {
		var l Ladder
		var policy string
		err := r.Scan(&l.EscalationID, &l.AlertID, &l.AlertName, &l.AlertState, &l.AlertSince, &l.Policy,
			&l.StepIdx, &l.NextAt, &l.LeasedUntil, &policy)
		policies = append(policies, policy)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading running ladders: %w", err)
	}
	if len(list) == 0 {
		return list, nil
	}
	steps := map[string][]LadderStep{}
	srows, err := db.Query(ctx, `
		SELECT s.policy_id::text, s.step_idx, extract(epoch FROM s.delay)::float8, s.channel, s.target
		FROM alr.escalation_steps s WHERE s.policy_id = ANY ($1::uuid[]) ORDER BY s.policy_id, s.step_idx`, policies)
	if err != nil {
		return nil, fmt.Errorf("reading ladder steps: %w", err)
	}
	var policy string
	var st LadderStep
	var delay float64
	if _, err := pgx.ForEachRow(srows, []any{&policy, &st.Idx, &delay, &st.Channel, &st.Target}, func() error {
		st.Delay = time.Duration(delay * float64(time.Second))
		steps[policy] = append(steps[policy], st)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading ladder steps: %w", err)
	}
	ids := make([]string, len(list))
	for i := range list {
		ids[i] = list[i].EscalationID
	}
	journal := map[string]map[int]string{}
	jrows, err := db.Query(ctx, `
		SELECT DISTINCT ON (j.escalation_id, j.step_idx) j.escalation_id::text, j.step_idx, j.outcome
		FROM alr.delivery_journal j WHERE j.escalation_id = ANY ($1::uuid[])
		ORDER BY j.escalation_id, j.step_idx, j.id DESC`, ids)
	if err != nil {
		return nil, fmt.Errorf("reading the delivery journal: %w", err)
	}
	var esc, outcome string
	var idx int
	if _, err := pgx.ForEachRow(jrows, []any{&esc, &idx, &outcome}, func() error {
		if journal[esc] == nil {
			journal[esc] = map[int]string{}
		}
		journal[esc][idx] = outcome
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading the delivery journal: %w", err)
	}
	for i := range list {
		l := &list[i]
		for _, s := range steps[policies[i]] {
			s.Current = s.Idx == l.StepIdx
			s.Journaled = journal[l.EscalationID][s.Idx]
			l.Steps = append(l.Steps, s)
		}
	}
	return list, nil
}

// EngineSession is an escalation engine connected to this database, as pg_stat_activity shows it
// to every role: its application_name (escalation.ApplicationName, then host and pid), login role
// and number of connections.
type EngineSession struct {
	Name        string
	Role        string
	Connections int64
}

// readEngines lists the sessions of escalation engines connected to this database. pg_stat_activity
// shows the application_name, database and role of every session to every role, so the reader's
// login needs no privilege for it.
func readEngines(ctx context.Context, db *pgxpool.Pool) ([]EngineSession, error) {
	rows, err := db.Query(ctx, `
		SELECT a.application_name, COALESCE(a.usename::text, ''), count(*)
		FROM pg_catalog.pg_stat_activity a
		WHERE a.datname = pg_catalog.current_database() AND pg_catalog.starts_with(a.application_name, $1)
		GROUP BY 1, 2 ORDER BY 1, 2`, escalation.ApplicationName)
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_activity: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EngineSession, error) {
		var e EngineSession
		err := r.Scan(&e.Name, &e.Role, &e.Connections)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_activity: %w", err)
	}
	return list, nil
}

// Delivery is the latest row of the delivery journal.
type Delivery struct {
	At      time.Time
	Outcome string
	Channel string
}

// readLastDelivery returns the newest journal row (its primary key, backwards), or nil.
func readLastDelivery(ctx context.Context, db *pgxpool.Pool) (*Delivery, error) {
	var d Delivery
	err := db.QueryRow(ctx, `SELECT j.delivered_at, j.outcome, j.channel FROM alr.delivery_journal j ORDER BY j.id DESC LIMIT 1`).
		Scan(&d.At, &d.Outcome, &d.Channel)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the delivery journal: %w", err)
	}
	return &d, nil
}

// requeuePoisoned is `pgdrain requeue`: nil ids = every poisoned row of the queue.
func requeuePoisoned(ctx context.Context, db *pgxpool.Pool, queue string, ids []int64) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT outbox.requeue_poisoned($1, $2::bigint[])`, queue, ids).Scan(&n); err != nil {
		return 0, fmt.Errorf("requeueing poisoned rows of %s: %w", queue, err)
	}
	return n, nil
}

// purgeSent is `pgdrain purge --chunk purgeChunk --max-rows purgeMaxRows`: outbox.purge_sent in
// chunks, each its own transaction, until a chunk deletes nothing or purgeMaxRows are gone.
func purgeSent(ctx context.Context, db *pgxpool.Pool, queue string, olderThan time.Duration) (int64, error) {
	var total int64
	for total < purgeMaxRows {
		var n int64
		size := min(int64(purgeChunk), purgeMaxRows-total)
		if err := db.QueryRow(ctx, `SELECT outbox.purge_sent($1, $2::interval, $3)`, queue, olderThan, size).Scan(&n); err != nil {
			return total, fmt.Errorf("purging sent rows of %s (after %d deleted): %w", queue, total, err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	return total, nil
}

// resolveAlert is alr.resolve_alert: the alert resolved and its ladders stopped, idempotently.
// releaseLease ends a stuck row's lease (outbox.release_lease, operators), only the one ending at
// until when given: false when the row was not leased any more (or by another lease).
// A schema before outbox 00046 has no fence: the lease is ended unfenced there, and fenced reports it.
func releaseLease(ctx context.Context, db *pgxpool.Pool, queue string, id int64, until *time.Time) (released, fenced bool, err error) {
	if until != nil {
		if err := db.QueryRow(ctx, `SELECT pg_catalog.to_regprocedure('outbox.release_lease(text,bigint,timestamptz)') IS NOT NULL`).Scan(&fenced); err != nil {
			return false, false, fmt.Errorf("releasing the lease of row %d of %s: %w", id, queue, err)
		}
	}
	sql, args := `SELECT outbox.release_lease($1, $2)`, []any{queue, id}
	if fenced {
		sql, args = `SELECT outbox.release_lease($1, $2, $3)`, append(args, until)
	}
	if err := db.QueryRow(ctx, sql, args...).Scan(&released); err != nil {
		return false, fenced, fmt.Errorf("releasing the lease of row %d of %s: %w", id, queue, err)
	}
	return released, fenced, nil
}

func resolveAlert(ctx context.Context, db *pgxpool.Pool, alertID string) error {
	if _, err := db.Exec(ctx, `SELECT alr.resolve_alert($1::uuid)`, alertID); err != nil {
		return fmt.Errorf("resolving alert %s: %w", alertID, err)
	}
	return nil
}

// alertState returns an alert's name, state and how many of its ladders run (index
// alert_escalations_alert): what resolving it changes.
func alertState(ctx context.Context, db *pgxpool.Pool, alertID string) (name, state string, running int64, err error) {
	err = db.QueryRow(ctx, `
		SELECT a.name, a.state,
		       (SELECT count(*) FROM alr.alert_escalations e WHERE e.alert_id = a.id AND e.stopped_at IS NULL)
		FROM alr.alerts a WHERE a.id = $1::uuid`, alertID).Scan(&name, &state, &running)
	if err != nil {
		return "", "", 0, fmt.Errorf("reading alert %s: %w", alertID, err)
	}
	return name, state, running, nil
}

// readAlert returns an alert's name and state for the resolve confirmation.
func readAlert(ctx context.Context, db *pgxpool.Pool, alertID string) (name, state string, err error) {
	err = db.QueryRow(ctx, `SELECT a.name, a.state FROM alr.alerts a WHERE a.id = $1::uuid`, alertID).Scan(&name, &state)
	if err != nil {
		return "", "", fmt.Errorf("reading alert %s: %w", alertID, err)
	}
	return name, state, nil
}

// poisonRow is `pgdrain skip`: outbox.poison_row, fenced by the attempt count the page showed;
// false when the row moved on or a worker is delivering it (nothing changed).
func poisonRow(ctx context.Context, db *pgxpool.Pool, queue string, id int64, attempts int, reason string) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, `SELECT outbox.poison_row($1, $2, $3, $4)`, queue, id, attempts, reason).Scan(&ok); err != nil {
		return false, fmt.Errorf("skipping row %d of %s: %w", id, queue, err)
	}
	return ok, nil
}

// retryRow is `pgdrain retry`: outbox.retry_row ends a backing-off row's backoff, fenced like
// poisonRow.
func retryRow(ctx context.Context, db *pgxpool.Pool, queue string, id int64, attempts int, reason string) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, `SELECT outbox.retry_row($1, $2, $3, $4)`, queue, id, attempts, reason).Scan(&ok); err != nil {
		return false, fmt.Errorf("retrying row %d of %s: %w", id, queue, err)
	}
	return ok, nil
}

// dismissPoisoned is `pgdrain dismiss`: outbox.dismiss_poisoned, the number of rows dismissed
// (those still poisoned and not being delivered).
func dismissPoisoned(ctx context.Context, db *pgxpool.Pool, queue string, ids []int64, reason string) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT outbox.dismiss_poisoned($1, $2::bigint[], $3)`, queue, ids, reason).Scan(&n); err != nil {
		return 0, fmt.Errorf("dismissing poisoned rows of %s: %w", queue, err)
	}
	return n, nil
}

// OperatorAction is one row of outbox.operator_log.
type OperatorAction struct {
	At           time.Time
	Action       string // poison, retry, dismiss
	ID           int64
	PartitionKey *string
	AttemptCount int
	Reason       *string
	By           string
}

// ActionCount is how many of the logged actions were of one kind.
type ActionCount struct {
	Action string
	N      int
}

// actionLogDepth is how many of a queue's newest operator actions the queue page reads to count
// them by kind (outbox.operator_log returns at most 1000); actionLogShown of them are listed.
const (
	actionLogDepth = 1000
	actionLogShown = 10
)

// readOperatorLog reads a queue's newest operator actions through outbox.operator_log (granted to
// pgdrain_reader; index operator_actions_queue, so the cost follows the rows read) and counts them
// by kind. more is true when the queue has more actions than were read.
func readOperatorLog(ctx context.Context, db *pgxpool.Pool, queue string) (shown []OperatorAction, counts []ActionCount, total int, more bool, err error) {
	rows, err := db.Query(ctx, `
		SELECT l.acted_at, l.action, l.id, l.partition_key, l.attempt_count, l.reason, l.acted_by
		FROM outbox.operator_log($1, $2) l`, queue, actionLogDepth)
	if err != nil {
		return nil, nil, 0, false, fmt.Errorf("reading outbox.operator_log(%s): %w", queue, err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OperatorAction, error) {
		var a OperatorAction
		err := r.Scan(&a.At, &a.Action, &a.ID, &a.PartitionKey, &a.AttemptCount, &a.Reason, &a.By)
		return a, err
	})
	if err != nil {
		return nil, nil, 0, false, fmt.Errorf("reading outbox.operator_log(%s): %w", queue, err)
	}
	for _, kind := range []string{"poison", "retry", "dismiss"} {
		n := 0
		for _, a := range list {
			if a.Action == kind {
				n++
			}
		}
		if n > 0 {
			counts = append(counts, ActionCount{Action: kind, N: n})
		}
	}
	return list[:min(len(list), actionLogShown)], counts, len(list), len(list) == actionLogDepth, nil
}

// ackInstalled reports whether alr is at 00006 or later (acknowledgements, resolved_alerts).
func ackInstalled(ctx context.Context, db *pgxpool.Pool) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT pg_catalog.to_regclass('alr.alert_acknowledgements') IS NOT NULL`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("looking for alr.alert_acknowledgements: %w", err)
	}
	return ok, nil
}

// AckedAlert is an alert someone acknowledged, firing or resolved.
type AckedAlert struct {
	AlertID        string
	Name           string
	Since          time.Time
	AcknowledgedAt *time.Time
	AcknowledgedBy *string
	Note           *string
	ResolvedAt     *time.Time
	Delivered      int64
}

// readAcknowledged lists the firing alerts someone acknowledged (their ladders stopped), newest
// acknowledgement first, at most listLimit: the acknowledgements joined to their alerts by primary key.
func readAcknowledged(ctx context.Context, db *pgxpool.Pool) ([]AckedAlert, error) {
	rows, err := db.Query(ctx, `
		SELECT a.id::text, a.name, a.created_at, k.acknowledged_at, k.acknowledged_by, k.note
		FROM alr.alert_acknowledgements k JOIN alr.alerts a ON a.id = k.alert_id
		WHERE a.state = 'firing'
		ORDER BY k.acknowledged_at DESC, a.id LIMIT $1`, listLimit)
	if err != nil {
		return nil, fmt.Errorf("reading acknowledged alerts: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AckedAlert, error) {
		var a AckedAlert
		err := r.Scan(&a.AlertID, &a.Name, &a.Since, &a.AcknowledgedAt, &a.AcknowledgedBy, &a.Note)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading acknowledged alerts: %w", err)
	}
	return list, nil
}

// resolvedShown is how many recently resolved alerts the escalations page lists.
const resolvedShown = 20

// readResolved lists the recently resolved alerts through alr.resolved_alerts (granted to
// pgdrain_reader; partial index alerts_resolved).
func readResolved(ctx context.Context, db *pgxpool.Pool) ([]AckedAlert, error) {
	rows, err := db.Query(ctx, `
		SELECT r.alert_id::text, r.name, r.created_at, r.acknowledged_at, r.acknowledged_by, r.note, r.resolved_at, r.steps_delivered
		FROM alr.resolved_alerts($1) r`, resolvedShown)
	if err != nil {
		return nil, fmt.Errorf("reading alr.resolved_alerts: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AckedAlert, error) {
		var a AckedAlert
		err := r.Scan(&a.AlertID, &a.Name, &a.Since, &a.AcknowledgedAt, &a.AcknowledgedBy, &a.Note, &a.ResolvedAt, &a.Delivered)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading alr.resolved_alerts: %w", err)
	}
	return list, nil
}

// acknowledgeAlert is alr.acknowledge_alert: false when the alert was already acknowledged or is
// resolved (nothing changed).
func acknowledgeAlert(ctx context.Context, db *pgxpool.Pool, alertID, note string) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, `SELECT alr.acknowledge_alert($1::uuid, $2)`, alertID, note).Scan(&ok); err != nil {
		return false, fmt.Errorf("acknowledging alert %s: %w", alertID, err)
	}
	return ok, nil
}
