package gocheck

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/testdb"
	"github.com/pgdrain/pgdrain/migrations"
)

// upEvent is the payload of the upgrade check's events: a number unique in the check, the key and
// its place in the key's order, and what the applier does with it ("ok", "flaky": fails once, then
// succeeds, "poison": fails permanently).
type upEvent struct {
	N    int    `json:"n"`
	Key  string `json:"key"`
	Seq  int    `json:"seq"`
	Plan string `json:"plan"`
}

func upDecode(b []byte) (upEvent, error) {
	var e upEvent
	err := json.Unmarshal(b, &e)
	return e, err
}

// upLedger is what the check produced and what was delivered, shared by producers, appliers and
// the check's own hand-driven worker.
type upLedger struct {
	mu        sync.Mutex
	next      int
	byWriters int                     // events committed by the producers
	produced  map[int]upProduced      // by N
	delivered map[int]int             // by N: successful applies
	order     map[string][]int        // queue/key: Seq in delivery order
	attempts  map[int]int             // by N: applies tried
	leases    map[string][]upLeaseRow // what the hand-driven worker holds, by group
}

type upProduced struct {
	queue string
	ev    upEvent
}

type upLeaseRow struct {
	queue string
	id    int64
	token string
	n     int
}

func newUpLedger() *upLedger {
	return &upLedger{produced: map[int]upProduced{}, delivered: map[int]int{}, order: map[string][]int{},
		attempts: map[int]int{}, leases: map[string][]upLeaseRow{}}
}

// event makes the next event of queue's key, numbered in the check.
func (l *upLedger) event(key string, seq int, plan string) upEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	return upEvent{N: l.next, Key: key, Seq: seq, Plan: plan}
}

func (l *upLedger) committed(queue string, evs ...upEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range evs {
		l.produced[ev.N] = upProduced{queue: queue, ev: ev}
	}
}

func (l *upLedger) deliver(queue string, ev upEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delivered[ev.N]++
	l.order[queue+"/"+ev.Key] = append(l.order[queue+"/"+ev.Key], ev.Seq)
}

// applier delivers queue's events: records the delivery, or fails as the event's plan says.
func (l *upLedger) applier(queue string) drainer.Applier[upEvent] {
	return func(_ context.Context, _ string, ev upEvent) error {
		l.mu.Lock()
		l.attempts[ev.N]++
		first := l.attempts[ev.N] == 1
		l.mu.Unlock()
		switch {
		case ev.Plan == "poison":
			return drainer.Permanent(errors.New("planned poison"))
		case ev.Plan == "flaky" && first:
			return drainer.Transient(errors.New("planned transient failure"))
		}
		l.deliver(queue, ev)
		return nil
	}
}

// upMaxAttempts is the check's queues' max_attempts: a poisoned row has this many attempts.
const upMaxAttempts = 3

// upQueues are the check's two queues: partitioned by k (per-key order is checked) and not.
var upQueues = []struct{ table, partition string }{{"public.keyed", "k"}, {"public.plain", ""}}

// insertEvents writes evs into queue with a plain INSERT, the way a producer's business
// transaction does.
func insertEvents(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, queue, partition string, evs ...upEvent) error {
	for _, ev := range evs {
		payload, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if partition == "" {
			_, err = q.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload) VALUES ('up', $1)`, queue), payload)
		} else {
			_, err = q.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, %s) VALUES ('up', $1, $2)`,
				queue, pgx.Identifier{partition}.Sanitize()), payload, ev.Key)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// A database at release 0.1.0 (the baseline migrations only) upgrades to the newest migration of
// each module while producers write and lease-mode drainers drain, with rows in every state when
// the upgrade starts: pending, leased by a claim_batch (one group settled after the upgrade with
// its old token, one left to expire and be claimed again), backing off after a transient
// apply_results, poisoned and sent; on a partitioned queue (each state at the head of its own keys,
// with rows waiting behind it) and an unpartitioned one. Producers (plain INSERTs, as
// pgdrain_producer, in transactions of one to three rows) and drainers (as pgdrain_worker) run
// before, across and after the upgrade. Then everything drains: every event is delivered exactly
// once, or poisoned where planned and never delivered; per key, delivery follows the order written;
// the stale token of an expired lease is refused; outbox.repair(queue, true) finds nothing and
// check_indexes nothing. An escalation step leased before the upgrade is recorded with its token
// after it.
//
// The upgrade is whatever migrations/ holds after the baseline (read from the embedded files, no
// list here): while the newest migration is the baseline itself (0.1.0), it applies nothing and
// the check shows the drain around it; every later migration is checked by it as it lands.
func TestUpgrade_FromBaselineWithDataInFlight(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	db := testdb.NewEmpty(t)
	sqlDB, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sqlDB.Close()
	for _, m := range migrations.Modules {
		p, err := migrations.NewProvider(sqlDB, m)
		require.NoError(t, err)
		_, err = p.UpTo(ctx, baselineVersion(t, m.Name))
		require.NoError(t, err, "module %s: the 0.1.0 baseline", m.Name)
	}
	owner := db.Pool
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := owner.Exec(ctx, q, args...)
		require.NoError(t, err, q)
	}
	for _, q := range upQueues {
		var partition *string
		if q.partition != "" {
			partition = &q.partition
		}
		exec(`SELECT outbox.create_queue($1, $2, $3, '50 milliseconds', '200 milliseconds')`, q.table, partition, upMaxAttempts)
	}
	ledger := newUpLedger()

	// Rows in every state, written and moved by hand (as a worker of the old release would).
	const perGroup = 4
	groups := []string{"sent", "backoff", "poisoned", "leased_settle", "leased_expire"}
	for _, q := range upQueues {
		var heads []upEvent
		for _, g := range groups {
			for i := range perGroup {
				plan := "ok"
				if g == "poisoned" {
					plan = "poison"
				}
				heads = append(heads, ledger.event(fmt.Sprintf("%s-%d", g, i), 0, plan))
			}
		}
		require.NoError(t, insertEvents(ctx, owner, q.table, q.partition, heads...))
		ledger.committed(q.table, heads...)
		rows, err := owner.Query(ctx, `SELECT id, lease_token::text, payload FROM outbox.claim_batch($1, 100, '3 seconds')`, q.table)
		require.NoError(t, err)
		type claimed struct {
			id    int64
			token string
			ev    upEvent
		}
		batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
			var c claimed
			var payload []byte
			if err := r.Scan(&c.id, &c.token, &payload); err != nil {
				return c, err
			}
			c.ev, err = upDecode(payload)
			return c, err
		})
		require.NoError(t, err)
		require.Len(t, batch, len(heads), "%s: the claim took every head", q.table)
		for _, c := range batch {
			group := c.ev.Key[:strings.LastIndex(c.ev.Key, "-")]
			switch group {
			case "sent":
				var ok bool
				require.NoError(t, owner.QueryRow(ctx, `SELECT outbox.apply_result($1, $2, $3::uuid, 'sent')`, q.table, c.id, c.token).Scan(&ok))
				require.True(t, ok)
				ledger.deliver(q.table, c.ev)
			case "backoff":
				// Backing off well past the upgrade: retry_at two seconds ahead.
				exec(`SELECT * FROM outbox.apply_results($1, ARRAY[$2::bigint], ARRAY[$3::uuid], ARRAY['transient'],
					ARRAY['peer unavailable'], ARRAY[now() + interval '2 seconds'])`, q.table, c.id, c.token)
			case "poisoned":
				exec(`SELECT outbox.apply_result($1, $2, $3::uuid, 'permanent', 'planned poison')`, q.table, c.id, c.token)
			case "leased_settle":
				// Settled after the upgrade with this token: held long enough for any upgrade.
				exec(`SELECT outbox.extend_lease($1, $2, $3::uuid, '5 minutes')`, q.table, c.id, c.token)
				fallthrough
			case "leased_expire":
				// Still held when the upgrade starts, even on a loaded machine (the claim's 3 s had
				// run out before the check below on one), and expired a few seconds after it.
				if group == "leased_expire" {
					exec(`SELECT outbox.extend_lease($1, $2, $3::uuid, '15 seconds')`, q.table, c.id, c.token)
				}
				fallthrough
			default:
				ledger.leases[group] = append(ledger.leases[group], upLeaseRow{queue: q.table, id: c.id, token: c.token, n: c.ev.N})
			}
		}
		// Rows waiting behind every head, and keys with nothing but pending rows.
		var behind []upEvent
		for _, g := range append(groups, "pending") {
			for i := range perGroup {
				for seq := 1; seq <= 2; seq++ {
					behind = append(behind, ledger.event(fmt.Sprintf("%s-%d", g, i), seq, "ok"))
				}
			}
		}
		require.NoError(t, insertEvents(ctx, owner, q.table, q.partition, behind...))
		ledger.committed(q.table, behind...)
	}
	for _, q := range upQueues {
		var pending, leased, backingOff, poisoned int64
		require.NoError(t, owner.QueryRow(ctx, `SELECT pending, leased, backing_off, poisoned FROM outbox.stats($1)`, q.table).
			Scan(&pending, &leased, &backingOff, &poisoned))
		require.Positive(t, pending, q.table)
		require.EqualValues(t, 2*perGroup, leased, "%s: leased rows before the upgrade", q.table)
		require.EqualValues(t, perGroup, backingOff, "%s: rows backing off before the upgrade", q.table)
		require.EqualValues(t, perGroup, poisoned, "%s: poisoned rows before the upgrade", q.table)
	}

	// A ladder step leased before the upgrade.
	var escalationID, escalationToken string
	require.NoError(t, owner.QueryRow(ctx, `SELECT alr.start_escalation(alr.add_alert('upgrade'),
		alr.create_policy('upgrade', '[{"delay":"0s","channel":"test","target":"t"},{"delay":"1h","channel":"test","target":"t"}]'))::text`).
		Scan(&escalationID))
	require.NoError(t, owner.QueryRow(ctx, `SELECT lease_token::text FROM alr.take_due_steps()`).Scan(&escalationToken))

	// Drainers (lease mode, as pgdrain_worker) and producers (as pgdrain_producer) run from here on.
	worker := loginPool(t, db, "pgdrain_worker")
	producer := loginPool(t, db, "pgdrain_producer")
	var stops []func() error
	for _, q := range upQueues {
		d, err := drainer.New(worker, drainer.Config{
			Table: q.table, ClaimMode: drainer.ClaimLease, BatchSize: 16, ApplyConcurrency: 4,
			PollFallback: 500 * time.Millisecond, ApplyTimeout: time.Second, Lease: 5 * time.Second,
			ExpectPartitionColumn: q.partition,
		}, upDecode, ledger.applier(q.table), drainer.WithLogger[upEvent](drLogger(t)))
		require.NoError(t, err)
		stops = append(stops, drStart(t, d))
	}
	const producers, perProducer = 3, 60
	producing, produceCtx := errgroup.WithContext(ctx)
	for p := range producers {
		producing.Go(func() error {
			seq := map[string]int{}
			for i, txn := 0, 0; i < perProducer; txn++ {
				q := upQueues[txn%len(upQueues)]
				rows := min(1+txn%3, perProducer-i)
				evs := make([]upEvent, 0, rows)
				for range rows {
					key := fmt.Sprintf("producer%d-%d", p, txn%5)
					plan := "ok"
					switch {
					case txn%11 == 5:
						plan = "poison"
					case txn%4 == 3:
						plan = "flaky"
					}
					seq[q.table+key]++
					evs = append(evs, ledger.event(key, seq[q.table+key], plan))
				}
				err := pgx.BeginFunc(produceCtx, producer, func(tx pgx.Tx) error {
					return insertEvents(produceCtx, tx, q.table, q.partition, evs...)
				})
				if err != nil {
					return fmt.Errorf("producer %d: %w", p, err)
				}
				ledger.committed(q.table, evs...)
				ledger.mu.Lock()
				ledger.byWriters += len(evs)
				ledger.mu.Unlock()
				i += rows
				time.Sleep(10 * time.Millisecond)
			}
			return nil
		})
	}

	// The upgrade, while both run: every migration of migrations/ after the baseline.
	drWaitFor(t, 30*time.Second, "producers under way", func() bool {
		ledger.mu.Lock()
		defer ledger.mu.Unlock()
		return ledger.byWriters >= 30
	})
	for _, m := range migrations.Modules {
		p, err := migrations.NewProvider(sqlDB, m)
		require.NoError(t, err)
		var after []string
		for _, s := range p.ListSources() {
			if s.Version > baselineVersion(t, m.Name) {
				after = append(after, s.Path)
			}
		}
		if len(after) == 0 {
			t.Logf("module %s: no migration after the baseline %05d yet: the upgrade applies nothing", m.Name, baselineVersion(t, m.Name))
		} else {
			t.Logf("module %s: upgrading from the baseline across %s", m.Name, strings.Join(after, ", "))
		}
		results, err := p.Up(ctx)
		require.NoError(t, err, "module %s: goose up from 0.1.0 with data in flight", m.Name)
		require.Len(t, results, len(after))
		v, err := p.GetDBVersion(ctx)
		require.NoError(t, err)
		require.EqualValues(t, newestMigration(t, m.Name), v)
	}
	// Functions the baseline's generators made while the data flowed (heads triggers, late-rows
	// functions, kept statements) were given the pinned search_path too (outbox 00030).
	var generated int
	var unpinned []string
	require.NoError(t, owner.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE p.proname ~ '^(_q[0-9]+_|tg_queue__heads_q)'),
		       COALESCE(array_agg(p.oid::regprocedure::text || ' ' || COALESCE(p.proconfig::text, '-'))
		                FILTER (WHERE NOT ('search_path=pg_catalog, pg_temp' = ANY (COALESCE(p.proconfig, '{}')))), '{}')
		FROM pg_proc p WHERE p.pronamespace IN ('outbox'::regnamespace, 'alr'::regnamespace, 'core'::regnamespace)`).Scan(&generated, &unpinned))
	require.Positive(t, generated, "the baseline made functions of its own before the upgrade")
	require.Empty(t, unpinned, "every function searches pg_catalog, then pg_temp")
	// Partitioned queues registered before 00042 got its key-fixed trigger.
	var withoutKeyFixed []string
	require.NoError(t, owner.QueryRow(ctx, `
		SELECT COALESCE(array_agg(q.queue), '{}') FROM outbox.queues q
		WHERE q.partition_column IS NOT NULL
		  AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = q.table_oid AND t.tgname = 'pgdrain_key_fixed')`).
		Scan(&withoutKeyFixed))
	require.Empty(t, withoutKeyFixed, "every partitioned queue refuses a change of an unsent row's key after the upgrade")

	// After the upgrade: the old worker settles one leased group with its tokens; the step leased
	// before it is recorded with its token.
	for _, l := range ledger.leases["leased_settle"] {
		// Delivered, then recorded, as a worker does (and as the drainers' applier notes it): noted
		// after the result, the row behind it, claimable from that commit on, could be noted first
		// by a drainer on a busy machine (CI once saw [1 0 2]).
		ledger.mu.Lock()
		ev := ledger.produced[l.n].ev
		ledger.mu.Unlock()
		ledger.deliver(l.queue, ev)
		var ok bool
		require.NoError(t, owner.QueryRow(ctx, `SELECT outbox.apply_result($1, $2, $3::uuid, 'sent')`, l.queue, l.id, l.token).Scan(&ok))
		require.True(t, ok, "%s row %d: a lease taken before the upgrade is still its holder's after it", l.queue, l.id)
	}
	var applied bool
	require.NoError(t, owner.QueryRow(ctx, `SELECT alr.apply_escalation($1::uuid, $2::uuid)`, escalationID, escalationToken).Scan(&applied))
	require.True(t, applied, "an escalation step leased before the upgrade is recorded with its token after it")

	require.NoError(t, producing.Wait())
	drWaitFor(t, 90*time.Second, "every deliverable row sent", func() bool {
		for _, q := range upQueues {
			var left int64
			require.NoError(t, owner.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE sent_at IS NULL AND attempt_count < $1`, q.table), upMaxAttempts).Scan(&left))
			if left > 0 {
				return false
			}
		}
		return true
	})
	for _, stop := range stops {
		require.NoError(t, stop())
	}

	// Every event delivered exactly once, or poisoned as planned; the database agrees.
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	perQueue := len(groups)*perGroup + (len(groups)+1)*perGroup*2 // heads, then two rows behind each key
	require.Len(t, ledger.produced, len(upQueues)*perQueue+producers*perProducer)
	for _, q := range upQueues {
		rows, err := owner.Query(ctx, fmt.Sprintf(`SELECT (payload->>'n')::int, sent_at IS NOT NULL, attempt_count FROM %s`, q.table))
		require.NoError(t, err)
		inTable := 0
		for rows.Next() {
			var n, attempts int
			var sent bool
			require.NoError(t, rows.Scan(&n, &sent, &attempts))
			inTable++
			p, ok := ledger.produced[n]
			require.True(t, ok, "%s: row of event %d was not produced by the check", q.table, n)
			require.Equal(t, q.table, p.queue)
			if p.ev.Plan == "poison" {
				require.False(t, sent, "%s: event %d is poisoned as planned", q.table, n)
				require.Equal(t, upMaxAttempts, attempts, "%s: event %d is poisoned as planned", q.table, n)
				require.Zero(t, ledger.delivered[n], "%s: poisoned event %d was never delivered", q.table, n)
			} else {
				require.True(t, sent, "%s: event %d (%+v) is sent", q.table, n, p.ev)
				require.Equal(t, 1, ledger.delivered[n], "%s: event %d (%+v) is delivered exactly once", q.table, n, p.ev)
			}
		}
		require.NoError(t, rows.Err())
		produced := 0
		for _, p := range ledger.produced {
			if p.queue == q.table {
				produced++
			}
		}
		require.Equal(t, produced, inTable, "%s: every produced event has its row", q.table)

		var findings, problems int
		require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM outbox.repair($1, true)`, q.table).Scan(&findings))
		require.Zero(t, findings, "%s: outbox.repair finds nothing to repair", q.table)
		require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM outbox.check_indexes($1)`, q.table).Scan(&problems))
		require.Zero(t, problems, "%s: the index set is right", q.table)
	}
	for key, seqs := range ledger.order {
		if !strings.HasPrefix(key, "public.keyed/") {
			continue
		}
		for i := 1; i < len(seqs); i++ {
			require.Less(t, seqs[i-1], seqs[i], "%s: delivered in the order written (%v)", key, seqs)
		}
	}
	// The leases left to expire were claimed again; their old tokens are refused.
	for _, l := range ledger.leases["leased_expire"] {
		var ok bool
		require.NoError(t, owner.QueryRow(ctx, `SELECT outbox.apply_result($1, $2, $3::uuid, 'sent')`, l.queue, l.id, l.token).Scan(&ok))
		require.False(t, ok, "%s row %d: an expired lease's token is refused", l.queue, l.id)
	}
}
