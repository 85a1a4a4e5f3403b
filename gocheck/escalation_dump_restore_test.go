package gocheck

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// TestEscalation_DumpAndRestoreKeepsTokensAndTheLadder: a database with ladders in flight goes
// through pg_dump -Fc and pg_restore into a new database (whole, in sections, and --schema-only
// followed by --data-only --disable-triggers, as docs/backup-restore.md describes: the ladder's
// tables reference each other, so a data-only load into the finished schema needs its foreign keys
// held back). At dump time: A1's step 0 recorded
// (apply_escalation) but not journaled (its token in applied_tokens), its step 1 due and free;
// A2's step 0 journaled, step 1 recorded but not journaled, step 2 leased; A3's step 0 leased;
// A4's step 0 recorded, not journaled, and then A4 resolved. Every fencing call with an old token
// (record_delivery, apply_escalation, release_step) is accepted or refused in the restored database
// exactly as in the source (and as the rules say); afterwards, as pgdrain_worker, the ladders go on
// to their ends, and every step is journaled exactly once.
func TestEscalation_DumpAndRestoreKeepsTokensAndTheLadder(t *testing.T) {
	for _, mode := range []string{"whole", "in sections", "schema-only then data-only with triggers disabled"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			src := testdb.New(t)
			f := escalationInFlight(t, src)

			probes := f.probes()
			before := runEscalationProbes(t, loginAs(t, src, "pgdrain_worker"), probes, true)
			for i, p := range probes {
				require.Equal(t, p.want, before[i], "source: %s", p.what)
			}
			var srcTokens string
			require.NoError(t, src.Pool.QueryRow(ctx, escalationStateSQL).Scan(&srcTokens))

			dump := filepath.Join(t.TempDir(), "src.dump")
			pgTool(t, "pg_dump", "-Fc", "-f", dump, "-d", src.URL)
			dst := testdb.NewEmpty(t)
			switch mode {
			case "whole":
				pgTool(t, "pg_restore", "--exit-on-error", "-d", dst.URL, dump)
			case "in sections": // the foreign keys come with post-data, after the rows
				for _, section := range []string{"pre-data", "data", "post-data"} {
					pgTool(t, "pg_restore", "--exit-on-error", "--section="+section, "-d", dst.URL, dump)
				}
			default: // the foreign keys of schema alr are not checked while the data is loaded (superuser)
				pgTool(t, "pg_restore", "--exit-on-error", "--schema-only", "-d", dst.URL, dump)
				pgTool(t, "pg_restore", "--exit-on-error", "--data-only", "--disable-triggers", "-d", dst.URL, dump)
			}
			var dstTokens string
			require.NoError(t, dst.Pool.QueryRow(ctx, escalationStateSQL).Scan(&dstTokens))
			require.Equal(t, srcTokens, dstTokens, "the ladders' steps, leases and applied_tokens are restored as they were")

			worker := loginAs(t, dst, "pgdrain_worker")
			after := runEscalationProbes(t, worker, probes, true)
			require.Equal(t, before, after, "every fencing call answers in the restored database as in the source")

			// For real now, in order: each call as the probe said, and the accepted ones only once.
			final := runEscalationProbes(t, worker, probes, false)
			require.Equal(t, before, final, "committed one by one, the calls answer as probed")
			again := runEscalationProbes(t, worker, probes, true)
			for i, p := range probes {
				require.Equal(t, "refused", again[i], "after it was accepted once, %s is refused", p.what)
			}
			// What the accepted probes recorded (A3's step 0, A2's step 2) is journaled by their taker.
			for _, j := range []struct {
				id    string
				step  int
				token string
			}{{f.a3, 0, f.t30}, {f.a2, 2, f.t22}} {
				var journaled *int64
				require.NoError(t, worker.QueryRow(ctx, `SELECT alr.record_delivery($1::uuid, $2, $3::uuid)`, j.id, j.step, j.token).Scan(&journaled))
				require.NotNil(t, journaled, "%s step %d journaled with the token that recorded it", j.id, j.step)
			}

			// The ladder goes on: every due step is taken, recorded and journaled until all stop.
			for round := 0; ; round++ {
				require.Less(t, round, 20, "the ladders did not finish")
				type step struct {
					id    string
					idx   int
					token string
				}
				rows, err := worker.Query(ctx, `SELECT escalation_id::text, step_idx, lease_token::text FROM alr.take_due_steps(100, '1 minute')`)
				require.NoError(t, err)
				steps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (step, error) {
					var s step
					return s, r.Scan(&s.id, &s.idx, &s.token)
				})
				require.NoError(t, err)
				if len(steps) == 0 {
					var running int
					require.NoError(t, dst.Pool.QueryRow(ctx, `SELECT count(*) FROM alr.alert_escalations WHERE stopped_at IS NULL`).Scan(&running))
					require.Zero(t, running, "no step is due, and no ladder still runs")
					break
				}
				for _, s := range steps {
					var applied bool
					require.NoError(t, worker.QueryRow(ctx, `SELECT alr.apply_escalation($1::uuid, $2::uuid)`, s.id, s.token).Scan(&applied))
					require.True(t, applied, "%s step %d recorded with the token that took it", s.id, s.idx)
					var journaled *int64
					require.NoError(t, worker.QueryRow(ctx, `SELECT alr.record_delivery($1::uuid, $2, $3::uuid)`, s.id, s.idx, s.token).Scan(&journaled))
					require.NotNil(t, journaled)
				}
			}
			want := map[string]int{}
			for _, id := range []string{f.a1, f.a2, f.a3} {
				for i := range 3 {
					want[fmt.Sprintf("%s:%d", id, i)] = 1
				}
			}
			want[f.a4+":0"] = 1
			require.Equal(t, want, deliveriesPerStep(t, dst.Pool), "every step journaled exactly once, across the restore")
			var stops string
			require.NoError(t, dst.Pool.QueryRow(ctx, `SELECT string_agg(stop_reason, ',' ORDER BY stop_reason) FROM alr.alert_escalations`).Scan(&stops))
			require.Equal(t, "completed,completed,completed,resolved", stops)
		})
	}
}

// escalationStateSQL renders every ladder's state (step, due, lease, token, applied_tokens).
const escalationStateSQL = `SELECT string_agg(format('%s %s %s %s %s %s %s', id, step_idx, next_at, leased_until, lease_token,
	applied_tokens, stop_reason), E'\n' ORDER BY id) FROM alr.alert_escalations`

// escalationFlight is the source database's ladders and the tokens handed out for them.
type escalationFlight struct {
	a1, a2, a3, a4           string // escalation ids
	t10, t20, t21, t22, t30  string // t<ladder><step>: the token that took the step
	t40, stale11, otherToken string
}

// escalationInFlight fills src as an operator, a producer and an engine (pgdrain_worker) would: see
// TestEscalation_DumpAndRestoreKeepsTokensAndTheLadder for the state it leaves.
func escalationInFlight(t *testing.T, src *testdb.DB) escalationFlight {
	t.Helper()
	ctx := context.Background()
	operator := loginAs(t, src, "pgdrain_operator")
	producer := loginAs(t, src, "pgdrain_producer")
	worker := loginAs(t, src, "pgdrain_worker")
	var policy string
	require.NoError(t, operator.QueryRow(ctx, `SELECT alr.create_policy('restore', '[
		{"delay": "0s", "channel": "telegram", "target": "@first"},
		{"delay": "0s", "channel": "telegram", "target": "@second"},
		{"delay": "0s", "channel": "telegram", "target": "@third"}]')::text`).Scan(&policy))
	ladders, alerts := make([]string, 4), make([]string, 4)
	for i := range ladders {
		require.NoError(t, producer.QueryRow(ctx, `SELECT alr.add_alert($1)::text`, fmt.Sprintf("alert %d", i+1)).Scan(&alerts[i]))
		// Step 0 due 40, 30, 20, 10 s ago: takes return the ladders in this order.
		ladders[i] = startLadder(t, src.Pool, alerts[i], policy, time.Duration(4-i)*10*time.Second)
	}
	f := escalationFlight{a1: ladders[0], a2: ladders[1], a3: ladders[2], a4: ladders[3], otherToken: uuid.NewString()}

	take := func() map[string]string {
		t.Helper()
		rows, err := worker.Query(ctx, `SELECT escalation_id::text, lease_token::text FROM alr.take_due_steps(100, '1 hour')`)
		require.NoError(t, err)
		taken := map[string]string{}
		var id, token string
		_, err = pgx.ForEachRow(rows, []any{&id, &token}, func() error { taken[id] = token; return nil })
		require.NoError(t, err)
		return taken
	}
	call := func(sql string, args ...any) {
		t.Helper()
		var ok *bool
		var journaled *int64
		if len(args) == 3 {
			require.NoError(t, worker.QueryRow(ctx, sql, args...).Scan(&journaled))
			require.NotNil(t, journaled, "%s %v", sql, args)
			return
		}
		require.NoError(t, worker.QueryRow(ctx, sql, args...).Scan(&ok))
		require.True(t, ok != nil && *ok, "%s %v", sql, args)
	}
	apply := `SELECT alr.apply_escalation($1::uuid, $2::uuid)`
	record := `SELECT alr.record_delivery($1::uuid, $2, $3::uuid)`
	release := `SELECT alr.release_step($1::uuid, $2::uuid)`

	taken := take()
	require.Len(t, taken, 4, "every ladder's step 0 is due")
	f.t10, f.t20, f.t30, f.t40 = taken[f.a1], taken[f.a2], taken[f.a3], taken[f.a4]
	call(apply, f.a1, f.t10)
	call(apply, f.a2, f.t20)
	call(record, f.a2, 0, f.t20)
	call(apply, f.a4, f.t40)
	_, err := producer.Exec(ctx, `SELECT alr.resolve_alert($1::uuid)`, alerts[3])
	require.NoError(t, err)

	taken = take()
	require.Len(t, taken, 2, "A1's and A2's step 1 are due (A3's step 0 is leased, A4 stopped)")
	f.stale11, f.t21 = taken[f.a1], taken[f.a2]
	call(release, f.a1, f.stale11) // A1's step 1 given back: free and due at dump time
	call(apply, f.a2, f.t21)

	taken = take()
	require.Len(t, taken, 2, "A1's step 1 again, and A2's step 2")
	f.t22 = taken[f.a2]
	call(release, f.a1, taken[f.a1])
	return f
}

// escalationProbe is one fencing call and the answer the rules give it at dump time.
type escalationProbe struct {
	what string
	sql  string
	args []any
	want string // "accepted" or "refused"
}

func (f escalationFlight) probes() []escalationProbe {
	record := `SELECT alr.record_delivery($1::uuid, $2, $3::uuid) IS NOT NULL`
	apply := `SELECT alr.apply_escalation($1::uuid, $2::uuid)`
	release := `SELECT alr.release_step($1::uuid, $2::uuid)`
	return []escalationProbe{
		{"journaling A1's recorded step 0 with its token", record, []any{f.a1, 0, f.t10}, "accepted"},
		{"journaling A1's step 0 with another token", record, []any{f.a1, 0, f.otherToken}, "refused"},
		{"journaling A2's step 0 again (journaled before the dump)", record, []any{f.a2, 0, f.t20}, "refused"},
		{"journaling A2's recorded step 1 with its token", record, []any{f.a2, 1, f.t21}, "accepted"},
		{"journaling A2's step 1 with step 0's token", record, []any{f.a2, 1, f.t20}, "refused"},
		{"journaling resolved A4's recorded step 0 with its token", record, []any{f.a4, 0, f.t40}, "accepted"},
		{"recording A3's leased step 0 with its lease token", apply, []any{f.a3, f.t30}, "accepted"},
		{"recording A3's step 0 with another token", apply, []any{f.a3, f.otherToken}, "refused"},
		{"recording A2's leased step 2 with its lease token", apply, []any{f.a2, f.t22}, "accepted"},
		{"recording A1's free step 1 with the token of its given-back take", apply, []any{f.a1, f.stale11}, "refused"},
		{"recording A1's step 1 with step 0's token", apply, []any{f.a1, f.t10}, "refused"},
		{"giving back A2's step 2 with step 1's token", release, []any{f.a2, f.t21}, "refused"},
		{"recording resolved A4 with its old token", apply, []any{f.a4, f.t40}, "refused"},
	}
}

// runEscalationProbes runs each probe, each in a transaction of its own that is rolled back (probe)
// or committed, and returns "accepted" or "refused" per probe.
func runEscalationProbes(t *testing.T, worker *pgx.Conn, probes []escalationProbe, rollback bool) []string {
	t.Helper()
	ctx := context.Background()
	got := make([]string, len(probes))
	for i, p := range probes {
		tx, err := worker.Begin(ctx)
		require.NoError(t, err)
		var ok bool
		require.NoError(t, tx.QueryRow(ctx, p.sql, p.args...).Scan(&ok), p.what)
		got[i] = map[bool]string{true: "accepted", false: "refused"}[ok]
		if rollback {
			require.NoError(t, tx.Rollback(ctx))
		} else {
			require.NoError(t, tx.Commit(ctx))
		}
	}
	return got
}
