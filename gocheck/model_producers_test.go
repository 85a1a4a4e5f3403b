package gocheck

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Producer steps of TestModel, all as a login role granted only pgdrain_producer. The model adds
// a transaction's events when, and in the order in which, its COMMIT succeeds.

// modelWriter is where a producer writes: an open transaction or a connection in autocommit.
type modelWriter interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// modelKeys is the key space of a partitioned queue: few keys, so per-key order is tested hard.
var modelKeys = []string{"k0", "k1", "k2", "k3", "k4", "k5"}

// randomKey picks a key of q ("" when unpartitioned); now and then a key never seen before, whose
// head is made at commit.
func (r *modelRun) randomKey(q *modelQueue) string {
	if !q.partitioned() {
		return ""
	}
	if r.rng.IntN(20) == 0 {
		return fmt.Sprintf("n%d", r.model.nextM)
	}
	return modelKeys[r.rng.IntN(len(modelKeys))]
}

func (r *modelRun) randomQueue() *modelQueue {
	return r.model.queues[r.rng.IntN(len(r.model.queues))]
}

func (r *modelRun) randomPartitionedQueue() *modelQueue {
	for {
		if q := r.randomQueue(); q.partitioned() {
			return q
		}
	}
}

func (r *modelRun) randomProducer() *pgx.Conn { return r.producers[r.rng.IntN(len(r.producers))] }

func modelPayload(e *modelEvent) map[string]any { return map[string]any{"m": e.m, "key": e.key} }

// newEvents makes n new events of q, with random keys unless key is given.
func (r *modelRun) newEvents(q *modelQueue, n int, key *string) []*modelEvent {
	events := make([]*modelEvent, n)
	for i := range events {
		k := r.randomKey(q)
		if key != nil {
			k = *key
		}
		events[i] = r.model.newEvent(q, k)
	}
	return events
}

// write makes n new events of q and writes them with one statement of a random kind: a
// multi-row INSERT, enqueue calls, or COPY.
func (r *modelRun) write(w modelWriter, q *modelQueue, n int, key *string) []*modelEvent {
	events := r.newEvents(q, n, key)
	if r.rng.IntN(4) == 0 {
		r.writeEnqueue(w, events)
	} else {
		r.writePlain(w, events)
	}
	return events
}

// writePlain writes events with a multi-row INSERT or COPY: what works on a table pgdrain does
// not know (enqueue needs the queue registered).
func (r *modelRun) writePlain(w modelWriter, events []*modelEvent) {
	if r.rng.IntN(3) == 0 {
		r.writeCopy(w, events)
	} else {
		r.writeInsert(w, events)
	}
}

// writeInsert writes events (all of one queue) with one plain INSERT ... VALUES: ids in row order.
func (r *modelRun) writeInsert(w modelWriter, events []*modelEvent) {
	q := events[0].queue
	cols := "event_type, payload"
	if q.partitioned() {
		cols += ", " + pgx.Identifier{q.keyColumn}.Sanitize()
	}
	var values []string
	var args []any
	for _, e := range events {
		args = append(args, modelPayload(e))
		row := fmt.Sprintf("('model', $%d", len(args))
		if q.partitioned() {
			args = append(args, e.key)
			row += fmt.Sprintf(", $%d", len(args))
		}
		values = append(values, row+")")
	}
	rows, err := w.Query(r.ctx, fmt.Sprintf("INSERT INTO %s (%s) VALUES %s RETURNING id", r.ident(q), cols, strings.Join(values, ", ")), args...)
	r.noErr(err, "INSERT into %s", q.name)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	r.noErr(err, "INSERT into %s", q.name)
	r.noteWritten("insert", events, ids)
}

// noteWritten logs written events with the ids their statement returned (provisional: a late
// row is renumbered at COMMIT).
func (r *modelRun) noteWritten(how string, events []*modelEvent, ids []int64) {
	for i, e := range events {
		if i < len(ids) {
			e.id = ids[i]
		}
	}
	r.note("%s%s", how, modelEventList(events))
}

// writeEnqueue writes each event with outbox.enqueue, one statement for all of them.
func (r *modelRun) writeEnqueue(w modelWriter, events []*modelEvent) {
	q := events[0].queue
	var calls []string
	var args []any
	for _, e := range events {
		var key any
		if q.partitioned() {
			key = e.key
		}
		args = append(args, q.name, modelPayload(e), key)
		calls = append(calls, fmt.Sprintf("outbox.enqueue($%d, 'model', $%d, $%d)", len(args)-2, len(args)-1, len(args)))
	}
	rows, err := w.Query(r.ctx, "SELECT ARRAY["+strings.Join(calls, ", ")+"]", args...)
	r.noErr(err, "enqueue into %s", q.name)
	ids, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[[]int64])
	r.noErr(err, "enqueue into %s", q.name)
	r.noteWritten("enqueue", events, ids)
}

// writeCopy writes events with COPY FROM STDIN.
func (r *modelRun) writeCopy(w modelWriter, events []*modelEvent) {
	q := events[0].queue
	cols := []string{"event_type", "payload"}
	if q.partitioned() {
		cols = append(cols, q.keyColumn)
	}
	rows := make([][]any, len(events))
	for i, e := range events {
		rows[i] = []any{"model", modelPayload(e)}
		if q.partitioned() {
			rows[i] = append(rows[i], e.key)
		}
	}
	n, err := w.CopyFrom(r.ctx, pgx.Identifier{q.schema, q.table}, cols, pgx.CopyFromRows(rows))
	r.noErr(err, "COPY into %s", q.name)
	if int(n) != len(events) {
		r.fail("nothing-lost", "COPY into %s wrote %d rows, want %d", q.name, n, len(events))
	}
	r.note("copy%s", modelEventList(events))
}

func (r *modelRun) ident(q *modelQueue) string { return pgx.Identifier{q.schema, q.table}.Sanitize() }

// modelEventList prints events as "[table/key:m<model id>#<row id> ...]" for the step log (no id
// when it is not known yet: COPY returns none).
func modelEventList(events []*modelEvent) string {
	parts := make([]string, len(events))
	for i, e := range events {
		parts[i] = fmt.Sprintf("%s/%s:m%d", e.queue.table, e.key, e.m)
		if e.id != 0 {
			parts[i] += fmt.Sprintf("#%d", e.id)
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// modelProducerTx is a producer's open transaction and the events it wrote, in order.
type modelProducerTx struct {
	r      *modelRun
	name   string
	tx     pgx.Tx
	events []*modelEvent
}

func (r *modelRun) beginProducer(conn *pgx.Conn, name string, iso pgx.TxIsoLevel) *modelProducerTx {
	tx, err := conn.BeginTx(r.ctx, pgx.TxOptions{IsoLevel: iso})
	r.noErr(err, "BEGIN %s", name)
	if iso != "" {
		r.note("%s: BEGIN %s;", name, iso)
	} else {
		r.note("%s: BEGIN;", name)
	}
	return &modelProducerTx{r: r, name: name, tx: tx}
}

func (p *modelProducerTx) write(q *modelQueue, n int, key *string) []*modelEvent {
	p.r.note("%s:", p.name)
	events := p.r.write(p.tx, q, n, key)
	p.events = append(p.events, events...)
	return events
}

func (p *modelProducerTx) exec(sql string) {
	_, err := p.tx.Exec(p.r.ctx, sql)
	p.r.noErr(err, "%s: %s", p.name, sql)
	p.r.note("%s: %s;", p.name, sql)
}

// rollbackTo undoes a savepoint: what was written since is gone, in the table and in the model.
func (p *modelProducerTx) rollbackTo(savepoint string, written int) {
	p.exec("ROLLBACK TO SAVEPOINT " + savepoint)
	p.events = p.events[:written]
}

// commit commits and tells the model. A REPEATABLE READ or SERIALIZABLE producer overtaken by another of the same
// key may fail with 40001 (docs/ordering.md), like any serialization failure; it then retries as a
// READ COMMITTED transaction, as an application would.
func (p *modelProducerTx) commit() {
	err := p.tx.Commit(p.r.ctx)
	if code, _ := sqlState(err); code == "40001" {
		p.r.note("%s: COMMIT failed with 40001 (allowed under REPEATABLE READ and SERIALIZABLE), retrying;", p.name)
		p.r.retry(p.tx.Conn(), p.events)
		return
	}
	p.r.noErr(err, "%s: COMMIT", p.name)
	p.r.note("%s: COMMIT;", p.name)
	p.r.model.commit(p.events)
}

// retry writes events again in one READ COMMITTED transaction.
func (r *modelRun) retry(conn *pgx.Conn, events []*modelEvent) {
	tx, err := conn.Begin(r.ctx)
	r.noErr(err, "BEGIN (retry)")
	for _, e := range events {
		r.writeInsert(tx, []*modelEvent{e})
	}
	r.noErr(tx.Commit(r.ctx), "COMMIT (retry)")
	r.model.commit(events)
}

// stepInsert: one event, one plain INSERT, autocommit.
func (r *modelRun) stepInsert() {
	q := r.randomQueue()
	e := r.model.newEvent(q, r.randomKey(q))
	r.writeInsert(r.randomProducer(), []*modelEvent{e})
	r.model.commit([]*modelEvent{e})
}

// stepEnqueue: one event through outbox.enqueue, autocommit.
func (r *modelRun) stepEnqueue() {
	q := r.randomQueue()
	e := r.model.newEvent(q, r.randomKey(q))
	r.writeEnqueue(r.randomProducer(), []*modelEvent{e})
	r.model.commit([]*modelEvent{e})
}

// stepCopy: COPY of a few rows, alone (autocommit) or beside an INSERT in one transaction.
func (r *modelRun) stepCopy() {
	q := r.randomQueue()
	conn := r.randomProducer()
	if r.rng.IntN(2) == 0 {
		events := r.newEvents(q, 1+r.rng.IntN(6), nil)
		r.writeCopy(conn, events)
		r.model.commit(events)
		return
	}
	p := r.beginProducer(conn, "P", "")
	p.write(q, 1, nil)
	p.r.note("P:")
	events := r.newEvents(q, 1+r.rng.IntN(6), nil)
	r.writeCopy(p.tx, events)
	p.events = append(p.events, events...)
	p.commit()
}

// stepTransaction: a multi-statement producer transaction on one queue.
func (r *modelRun) stepTransaction() {
	q := r.randomQueue()
	p := r.beginProducer(r.randomProducer(), "P", "")
	for range 2 + r.rng.IntN(3) {
		p.write(q, 1+r.rng.IntN(3), nil)
	}
	p.commit()
}

// stepTwoQueues: one transaction writing two or three queues, statements interleaved.
func (r *modelRun) stepTwoQueues() {
	p := r.beginProducer(r.randomProducer(), "P", "")
	order := r.rng.Perm(len(r.model.queues))
	for _, i := range order[:2+r.rng.IntN(len(order)-1)] {
		p.write(r.model.queues[i], 1+r.rng.IntN(2), nil)
	}
	p.write(r.model.queues[order[0]], 1, nil)
	p.commit()
}

// stepSavepoint: rows written after a savepoint that is rolled back must vanish; rows of a
// released savepoint stay.
func (r *modelRun) stepSavepoint() {
	q := r.randomQueue()
	p := r.beginProducer(r.randomProducer(), "P", "")
	p.write(q, 1+r.rng.IntN(2), nil)
	p.exec("SAVEPOINT a")
	kept := len(p.events)
	p.write(q, 1+r.rng.IntN(3), nil)
	if r.rng.IntN(2) == 0 {
		p.write(r.randomQueue(), 1, nil)
	}
	p.rollbackTo("a", kept)
	p.write(q, 1, nil)
	if r.rng.IntN(2) == 0 {
		p.exec("SAVEPOINT b")
		p.write(q, 1+r.rng.IntN(2), nil)
		p.exec("RELEASE SAVEPOINT b")
	}
	p.commit()
}

// stepImmediateConstraints: SET CONSTRAINTS ... IMMEDIATE (ORMs and migration tools do it) before
// inserts of several keys in separate statements, sometimes more inserts after a second SET.
func (r *modelRun) stepImmediateConstraints() {
	q := r.randomPartitionedQueue()
	p := r.beginProducer(r.randomProducer(), "P", "")
	if r.rng.IntN(2) == 0 {
		p.exec("SET CONSTRAINTS ALL IMMEDIATE")
	} else {
		p.exec("SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE")
	}
	for _, i := range r.rng.Perm(len(modelKeys))[:3] {
		p.write(q, 1, &modelKeys[i])
	}
	if r.rng.IntN(2) == 0 {
		p.exec("SET CONSTRAINTS ALL DEFERRED")
		p.write(r.randomQueue(), 1+r.rng.IntN(2), nil)
	}
	p.commit()
}

// stepRepeatableRead: a REPEATABLE READ producer on its own (nobody overtakes it: it must commit).
func (r *modelRun) stepRepeatableRead() {
	p := r.beginProducer(r.randomProducer(), "P", pgx.RepeatableRead)
	for range 1 + r.rng.IntN(3) {
		p.write(r.randomQueue(), 1+r.rng.IntN(2), nil)
	}
	p.commit()
}

// stepSerializable: a SERIALIZABLE producer on its own, sometimes in several statements, sometimes
// with its commit step run early (SET CONSTRAINTS ALL IMMEDIATE): its notes live in its hook, and
// its keys get wake notes instead of heads (00023). Nobody overtakes it: it must commit.
func (r *modelRun) stepSerializable() {
	p := r.beginProducer(r.randomProducer(), "P", pgx.Serializable)
	for i := range 1 + r.rng.IntN(3) {
		if i > 0 && r.rng.IntN(4) == 0 {
			p.exec("SET CONSTRAINTS ALL IMMEDIATE")
		}
		p.write(r.randomQueue(), 1+r.rng.IntN(2), nil)
	}
	p.commit()
}

// stepOverlap: two producers of one key on two connections. A inserts, B inserts, B commits, A
// commits: ids in one order, commits in the other; delivered order must be B's rows, then A's.
// A is sometimes REPEATABLE READ or SERIALIZABLE; a drainer sometimes claims while they are open or in between.
func (r *modelRun) stepOverlap() {
	q := r.randomPartitionedQueue()
	key := modelKeys[r.rng.IntN(len(modelKeys))]
	iso := pgx.TxIsoLevel("")
	switch r.rng.IntN(8) {
	case 0, 1:
		iso = pgx.RepeatableRead
	case 2:
		iso = pgx.Serializable
	}
	a := r.beginProducer(r.producers[0], "A", iso)
	a.write(q, 1+r.rng.IntN(2), &key)
	if r.rng.IntN(2) == 0 {
		a.write(q, 1, nil)
	}
	b := r.beginProducer(r.producers[1], "B", "")
	b.write(q, 1+r.rng.IntN(2), &key)
	if r.rng.IntN(3) == 0 {
		r.note("claim while A and B are open:")
		r.claimLease(q, false)
	}
	b.commit()
	if r.rng.IntN(2) == 0 {
		r.note("claim between the commits:")
		r.claimLease(q, false)
	}
	a.commit()
}

// modelForgedColumns are the columns that steer delivery, each with a value a producer could use
// to wedge or jump its key (issue 11, case 9): a producer may not write any of them.
var modelForgedColumns = [][2]string{
	{"id", "1000000000"}, {"attempt_count", "-1"}, {"next_attempt_at", "'infinity'"},
	{"sent_at", "now()"}, {"leased_until", "'infinity'"}, {"lease_token", "gen_random_uuid()"},
	{"last_error", "'forged'"},
}

// stepProducerRefused: what a producer may not write is refused, and leaves nothing behind (the
// checks find any row that slipped in): a column that steers delivery (42501), a JSON null payload
// and, on a partitioned queue, a blank key (issue 11, case 10: 22023 from enqueue, 23514 from a
// CHECK on a plain INSERT).
func (r *modelRun) stepProducerRefused() {
	q := r.randomQueue()
	refusals := r.refusals(q)
	x := refusals[r.rng.IntN(len(refusals))]
	_, err := r.randomProducer().Exec(r.ctx, x.sql)
	if code, _ := sqlState(err); code != x.code {
		r.fail("least-privilege", "a producer's %s: want SQLSTATE %s, got %v", x.sql, x.code, err)
	}
	r.note("refused (%s): %s;", x.code, x.sql)
}

// modelRefusal is a statement a producer's role must not be able to run, and its SQLSTATE.
type modelRefusal struct{ sql, code string }

// refusals lists what a producer may try on q and must be refused.
func (r *modelRun) refusals(q *modelQueue) []modelRefusal {
	insert := func(payload, key, column, value string) modelRefusal {
		cols, vals := "event_type, payload", "'model', '"+payload+"'"
		if q.partitioned() {
			cols, vals = cols+", "+pgx.Identifier{q.keyColumn}.Sanitize(), vals+", '"+key+"'"
		}
		if column != "" {
			cols, vals = cols+", "+column, vals+", "+value
		}
		code := "23514"
		if column != "" {
			code = "42501"
		}
		return modelRefusal{fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", r.ident(q), cols, vals), code}
	}
	enqueue := func(payload, key string) modelRefusal {
		keyArg := "NULL"
		if q.partitioned() {
			keyArg = "'" + key + "'"
		}
		return modelRefusal{fmt.Sprintf("SELECT outbox.enqueue('%s', 'model', '%s', %s)", q.name, payload, keyArg), "22023"}
	}
	forged := modelForgedColumns[r.rng.IntN(len(modelForgedColumns))]
	out := []modelRefusal{
		insert(`{"m": -1}`, "k0", forged[0], forged[1]),
		insert("null", "k0", "", ""),
		enqueue("null", "k0"),
	}
	if q.partitioned() {
		blank := []string{"", "  "}[r.rng.IntN(2)]
		out = append(out, insert(`{"m": -1}`, blank, "", ""), enqueue(`{"m": -1}`, blank))
	}
	return out
}
