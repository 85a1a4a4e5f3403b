package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The checks that read the queue table's rows and its id sequence, not only the catalogs. They
// need SELECT on the table (id, sent_at and the columns its CHECK constraints name) and on the
// sequence, which the table's owner has and pgdrain_operator has not: without it they are skipped,
// said so, and do not change the exit code.
const (
	checkConstraintsName = "constraints"
	checkSequenceName    = "sequence"
	checkKeyTypeName     = "key type"
)

// maxOffendingIDs is how many ids of the pending rows that break a CHECK a finding names.
const maxOffendingIDs = 5

// skipped is a check that could not run, and why (a role without SELECT on the queue table).
type skipped struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

// checkConstraint is one CHECK constraint of the queue table.
type checkConstraint struct {
	name      string
	expr      string // pg_get_expr: names outside pg_catalog qualified, as the pinned search_path needs
	validated bool
}

// checkConstraints reports the CHECK constraints of the queue table that pending rows break: any
// constraint, pgdrain's pgdrain_* and the table owner's, NOT VALID ones included (those are
// the usual way such rows come about). Every claim UPDATEs the rows it takes and PostgreSQL tests
// every CHECK on UPDATE, so a claim that takes such a row fails with 23514 and takes nothing; the
// row stays its key's head (the oldest of the queue, unpartitioned), so the queue stalls while
// wedged_partitions calls it ready. One pass over the pending rows (which the queue's partial
// indexes cover) tests every constraint, in a read-only transaction: the expressions are the
// table owner's and run as the role running check.
func checkConstraints(ctx context.Context, conn *pgx.Conn, t queueTable) ([]finding, *skipped, error) {
	rows, err := conn.Query(ctx, `
		SELECT con.conname::text, pg_catalog.pg_get_expr(con.conbin, con.conrelid), con.convalidated
		FROM pg_catalog.pg_constraint con
		WHERE con.conrelid = $1 AND con.contype = 'c'
		ORDER BY con.conname`, t.oid)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the table's CHECK constraints: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (checkConstraint, error) {
		var c checkConstraint
		err := r.Scan(&c.name, &c.expr, &c.validated)
		return c, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("reading the table's CHECK constraints: %w", err)
	}
	return brokenConstraints(ctx, conn, t, list)
}

// brokenConstraints tests the pending rows of t against list in one statement. When a constraint
// raises an error on a row (a data exception: a claim that takes the row fails the same way), it
// tests each constraint alone to name it.
func brokenConstraints(ctx context.Context, conn *pgx.Conn, t queueTable, list []checkConstraint) ([]finding, *skipped, error) {
	if len(list) == 0 {
		return nil, nil, nil
	}
	cols := make([]string, 0, 2*len(list))
	for _, c := range list {
		cols = append(cols,
			fmt.Sprintf("pg_catalog.count(*) FILTER (WHERE NOT (%s))", c.expr),
			fmt.Sprintf("(pg_catalog.array_agg(id ORDER BY id) FILTER (WHERE NOT (%s)))[1:%d]", c.expr, maxOffendingIDs))
	}
	counts := make([]int64, len(list))
	ids := make([][]int64, len(list))
	dest := make([]any, 0, 2*len(list))
	for i := range list {
		dest = append(dest, &counts[i], &ids[i])
	}
	err := readOnly(ctx, conn, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT "+strings.Join(cols, ", ")+" FROM "+t.ident+" WHERE sent_at IS NULL").Scan(dest...)
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return nil, &skipped{Check: checkConstraintsName, Detail: fmt.Sprintf(
			"%s (SQLSTATE 42501): testing the pending rows against the CHECK constraints needs SELECT on %s "+
				"(id, sent_at and the columns the constraints name); run check as the table's owner", pgErr.Message, t.ident)}, nil
	case errors.As(err, &pgErr) && pgErr.Code == "57014":
		return nil, &skipped{Check: checkConstraintsName, Detail: fmt.Sprintf(
			"testing the pending rows of %s against its CHECK constraints took longer than %s (a slow constraint or a large "+
				"backlog); not checked", t.ident, constraintScanTimeout)}, nil
	case errors.As(err, &pgErr) && raisedByTheRows(pgErr) && len(list) > 1:
		var out []finding
		for _, c := range list {
			f, skip, err := brokenConstraints(ctx, conn, t, []checkConstraint{c})
			if err != nil || skip != nil {
				return nil, skip, err
			}
			out = append(out, f...)
		}
		return out, nil, nil
	case errors.As(err, &pgErr) && raisedByTheRows(pgErr):
		c := list[0]
		return []finding{{Check: checkConstraintsName, Problem: "fails", Name: ptr(c.name), Detail: fmt.Sprintf(
			"CHECK %s of %s raises an error on a pending row: %s (SQLSTATE %s); a claim that takes the row fails the same way, "+
				"and the queue stalls: fix the row, or the constraint (ALTER TABLE %s DROP CONSTRAINT %s, and ADD it again, NOT VALID, fixed)",
			c.name, t.ident, pgErr.Message, pgErr.Code, t.ident, pgx.Identifier{c.name}.Sanitize())}}, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("testing the pending rows against the table's CHECK constraints: %w", err)
	}
	var out []finding
	for i, c := range list {
		if counts[i] == 0 {
			continue
		}
		state := ""
		if !c.validated {
			state = " (NOT VALID)"
		}
		name := pgx.Identifier{c.name}.Sanitize()
		out = append(out, finding{Check: checkConstraintsName, Problem: "broken by pending rows", Name: ptr(c.name), Detail: fmt.Sprintf(
			"%d pending row(s) of %s break CHECK %s%s (%s): ids %s; every claim UPDATEs the rows it takes and PostgreSQL tests every CHECK "+
				"on UPDATE, so a claim that takes one fails with 23514 (lock mode: settle_locked, and the batch is delivered again) and "+
				"the queue stalls while wedged calls it ready. Fix those rows (UPDATE %s SET ... WHERE id IN (...)), or drop the "+
				"constraint (ALTER TABLE %s DROP CONSTRAINT %s) and add it again, NOT VALID, once they are sent",
			counts[i], t.ident, c.name, state, c.expr, idList(ids[i], counts[i]), t.ident, t.ident, name)})
	}
	return out, nil, nil
}

// checkSequence reports a queue's id sequence behind the ids already in its table (a setval
// backwards, ALTER COLUMN id RESTART, explicit ids above the sequence): producers' inserts then
// fail with 23505 (duplicate key) on the ids already taken, and rows with ids above the sequence
// break per-key order (docs/operations.md). max(id) is one probe of the primary key. Ids count up
// (create_queue's identity column); a sequence that counts down is not checked.
func checkSequence(ctx context.Context, conn *pgx.Conn, t queueTable) ([]finding, *skipped, error) {
	if t.sequence == "" {
		return nil, nil, nil
	}
	var last, increment int64
	var called bool
	var maxID *int64
	err := conn.QueryRow(ctx, `
		SELECT s.last_value, s.is_called, ps.seqincrement, (SELECT pg_catalog.max(t.id) FROM `+t.ident+` t)
		FROM `+t.sequence+` s, pg_catalog.pg_sequence ps WHERE ps.seqrelid = $1::regclass`,
		t.sequence).Scan(&last, &called, &increment, &maxID)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return nil, &skipped{Check: checkSequenceName, Detail: fmt.Sprintf(
			"%s (SQLSTATE 42501): comparing the id sequence with the largest id needs SELECT on %s and on %s (id); "+
				"run check as the table's owner", pgErr.Message, t.sequence, t.ident)}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading the queue's id sequence: %w", err)
	}
	if maxID == nil || increment < 0 || last > *maxID || (called && last == *maxID) {
		return nil, nil, nil
	}
	next := "last gave out " + strconv.FormatInt(last, 10)
	if !called {
		next = "gives out " + strconv.FormatInt(last, 10) + " next"
	}
	literal := "'" + strings.ReplaceAll(t.sequence, "'", "''") + "'"
	return []finding{{Check: checkSequenceName, Problem: "behind the ids", Name: ptr(t.sequence), Detail: fmt.Sprintf(
		"the id sequence %s %s, but %s holds ids up to %d: producers' inserts fail with 23505 (duplicate key) on the ids "+
			"already taken, and the rows above the sequence break per-key order (docs/operations.md, ids not from the queue's "+
			"sequence); SELECT pg_catalog.setval(%s, (SELECT max(id) FROM %s))",
		t.sequence, next, t.ident, *maxID, literal, t.ident)}}, nil, nil
}

// idList writes up to maxOffendingIDs ids, and how many more there are.
func idList(ids []int64, total int64) string {
	text := make([]string, len(ids))
	for i, id := range ids {
		text[i] = strconv.FormatInt(id, 10)
	}
	out := strings.Join(text, ", ")
	if more := total - int64(len(ids)); more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

// readOnly runs f in a READ ONLY transaction and rolls it back: what check evaluates on the
// queue's rows (the CHECK expressions) is the table owner's, and must not write as the caller.
func readOnly(ctx context.Context, conn *pgx.Conn, f func(pgx.Tx) error) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// The constraints are the table owner's expressions, over every pending row: bounded, so that a
	// slow one over a large backlog is reported as not checked rather than holding check for hours.
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = '%dms'", constraintScanTimeout.Milliseconds())); err != nil {
		return err
	}
	return f(tx)
}

// constraintScanTimeout bounds the pass over the pending rows (readOnly).
const constraintScanTimeout = time.Minute

// raisedByTheRows: an error a constraint's expression raised on a row (a data exception, an
// exception its function raised, a function it calls that is missing under pgdrain's search_path,
// a write it attempts in check's read-only transaction), which a claim that takes the row meets
// too (except a write: claims run read-write), as opposed to check's own failure to read the table
// (42501, handled before) or to reach the server.
func raisedByTheRows(e *pgconn.PgError) bool {
	switch {
	case strings.HasPrefix(e.Code, "08"), strings.HasPrefix(e.Code, "53"), strings.HasPrefix(e.Code, "57"),
		strings.HasPrefix(e.Code, "58"), e.Code == "42501", e.Code == "40001", e.Code == "40P01":
		return false
	}
	return true
}

// checkKeyType reports a partition column that can not key partitions (outbox._key_type_problem,
// 00044): its equal values have different texts, or texts that depend on the writer's settings,
// and rows of one key can be delivered together or out of commit order. create_queue refuses such
// a column for a new queue; a queue registered before keeps running with it. Skipped on a schema
// before 00044, and when the login may not call the function.
func checkKeyType(ctx context.Context, conn *pgx.Conn, t queueTable) ([]finding, *skipped, error) {
	if !t.partitioned {
		return nil, nil, nil
	}
	var judged bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regprocedure('outbox._key_type_problem(regclass, text)') IS NOT NULL`).
		Scan(&judged); err != nil {
		return nil, nil, fmt.Errorf("reading the schema's functions: %w", err)
	}
	if !judged {
		return nil, &skipped{Check: checkKeyTypeName, Detail: "the schema is before migration 00044, which judges partition key types: run goose-run up"}, nil
	}
	var problem, column *string
	err := conn.QueryRow(ctx, `
		SELECT outbox._key_type_problem(q.table_oid, q.partition_column), q.partition_column
		FROM outbox.queues q WHERE q.queue = $1`, t.name).Scan(&problem, &column)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return nil, &skipped{Check: checkKeyTypeName, Detail: fmt.Sprintf(
			"%s (SQLSTATE 42501): judging the partition column's type needs EXECUTE on outbox._key_type_problem; "+
				"run check as the role that migrated pgdrain", pgErr.Message)}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("judging the partition column's type: %w", err)
	case problem == nil:
		return nil, nil, nil
	}
	return []finding{{Check: checkKeyTypeName, Problem: "can not key partitions", Name: column, Detail: fmt.Sprintf(
		"partition column %s of %s: %s; rows of one key can be delivered together or out of commit order "+
			"(docs/operations.md, partition key types)", *column, t.ident, *problem)}}, nil, nil
}
