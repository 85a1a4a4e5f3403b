package gocheck

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/drainer"
)

// drDamage breaks the derived state of one partition ($1, whose only row is $2) so that no claim
// reaches its pending row, the way a bug in the SQL would; each names the cause outbox.repair
// reports for it. Each can be applied again: a claim may turn one damage into another (an empty
// head with its floor too high is dropped, leaving the key without a head).
var drDamage = []struct{ cause, sql string }{
	{"missing_head", `DELETE FROM outbox.partition_heads WHERE partition_key = $1 AND $2::bigint > 0`},
	{"floor_above_row", `
		INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
		SELECT q.queue_id, $1, NULL, $2::bigint + 1000 FROM outbox.queues q WHERE q.queue = 'public.events'
		ON CONFLICT (queue_id, partition_key) DO UPDATE
		SET head_id = NULL, floor_id = EXCLUDED.floor_id, parked_until = NULL`},
	{"parked_past_due", `
		UPDATE outbox.partition_heads SET parked_until = now() + interval '1 hour'
		WHERE partition_key = $1 AND head_id = $2::bigint`},
}

// drDamagedQueue is a partitioned queue whose heads are built (a claim ran), with one healthy row
// (key "ok") and one row of key "victim" whose derived state damage broke. It returns the victim's id.
func drDamagedQueue(t *testing.T, damage string) (*drQueue, int64) {
	t.Helper()
	ctx := context.Background()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
	_, err := q.pool.Exec(ctx, `SELECT count(*) FROM outbox.claim_batch('public.events')`) // builds the heads
	require.NoError(t, err)
	victim := q.enqueue(t, "victim", "op", 1)
	q.enqueue(t, "ok", "op", 1)
	tag, err := q.pool.Exec(ctx, damage, "victim", victim)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	return q, victim
}

func drRepairs(t *testing.T, reg prometheus.Gatherer, cause string) float64 {
	t.Helper()
	return drMetric(t, reg, "pgdrain_repairs_total", map[string]string{"queue": "public.events", "cause": cause})
}

// Derived state broken behind the drainer's back (a head deleted, a floor raised above the row, a
// head parked an hour past its row's due time) leaves a row no claim reaches: with the repair pass
// off it stays pending. A drainer connected as pgdrain_worker with a short RepairInterval repairs
// it, logs the repair at Warn with queue, key, cause, head id and detail, counts it in
// pgdrain_repairs_total{queue,cause} and delivers the row at once (PollFallback is 1 minute).
func TestDrainer_RepairPass_DeliversRowsNoClaimReached(t *testing.T) {
	t.Parallel()
	for _, dmg := range drDamage {
		t.Run(dmg.cause, func(t *testing.T) {
			t.Parallel()
			drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
				q, victim := drDamagedQueue(t, dmg.sql)
				worker := loginPool(t, q.db, "pgdrain_worker")
				var applied drLog
				apply := func(ctx context.Context, _ string, e drEvent) error {
					applied.add(ctx, e)
					return nil
				}

				// The control: without the repair pass the healthy row goes, the victim stays.
				off := q.config(mode)
				off.RepairInterval = -1
				d, reg := drNew(t, worker, off, apply)
				stop := drStart(t, d)
				drWaitFor(t, 5*time.Second, "the healthy row", func() bool { return q.sent(t) == 1 })
				time.Sleep(time.Second)
				require.NoError(t, stop())
				require.EqualValues(t, 1, q.sent(t), "the damaged row is stuck without the repair pass")
				require.Equal(t, 0.0, drRepairs(t, reg, dmg.cause))
				_, err := q.pool.Exec(context.Background(), dmg.sql, "victim", victim)
				require.NoError(t, err)
				var found []string
				rows, err := q.pool.Query(context.Background(), `SELECT cause FROM outbox.repair('public.events', true)`)
				require.NoError(t, err)
				for rows.Next() {
					var c string
					require.NoError(t, rows.Scan(&c))
					found = append(found, c)
				}
				require.NoError(t, rows.Err())
				require.Equal(t, []string{dmg.cause}, found, "the damage is in place before the repairing drainer starts")

				on := q.config(mode)
				on.RepairInterval = 200 * time.Millisecond
				logger, buf := drCapture(t)
				d, reg = drNew(t, worker, on, apply, drainer.WithLogger[drEvent](logger))
				start := time.Now()
				stop = drStart(t, d)
				drWaitFor(t, 5*time.Second, "the damaged row delivered after the repair", func() bool { return q.sent(t) == 2 })
				require.Less(t, time.Since(start), 5*time.Second)
				require.NoError(t, stop())

				_, ids := applied.snapshot()
				require.Contains(t, ids, victim)
				// An empty head whose floor is too high is dropped by the first claim that looks at it
				// (under the key's producer lock), which turns the damage into a missing head: whichever
				// of the two the repair pass met first is what it counts.
				cause := dmg.cause
				if cause == "floor_above_row" && drRepairs(t, reg, "missing_head") == 1 {
					cause = "missing_head"
				}
				require.Equal(t, 1.0, drRepairs(t, reg, cause), "counted once, with its cause")
				log := buf.String()
				var line string
				for l := range strings.Lines(log) {
					if strings.Contains(l, "repaired derived state") {
						require.Empty(t, line, "one repair, one line:\n%s", log)
						line = l
					}
				}
				require.Contains(t, line, "level=WARN")
				require.Contains(t, line, "queue=public.events")
				require.Contains(t, line, "partition_key=victim")
				require.Contains(t, line, "cause="+cause)
				require.Contains(t, line, "head_id=")
				require.Contains(t, line, "detail=")
				drNoPrivilegeErrors(t, log)
			})
		})
	}
}

// Replicas take turns: three drainers repairing the same queue at once (outbox.repair lets one
// session at a time through and the next finds nothing left) count each of ten broken partitions
// exactly once between them, and every row is delivered.
func TestDrainer_RepairPass_ReplicasCountEachRepairOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
	_, err := q.pool.Exec(ctx, `SELECT count(*) FROM outbox.claim_batch('public.events')`)
	require.NoError(t, err)
	const broken = 10
	for i := range broken {
		q.enqueue(t, fmt.Sprintf("victim-%d", i), "op", 1)
	}
	_, err = q.pool.Exec(ctx, `DELETE FROM outbox.partition_heads WHERE partition_key LIKE 'victim-%'`)
	require.NoError(t, err)

	var regs []prometheus.Gatherer
	for i := range 3 {
		worker := loginPool(t, q.db, "pgdrain_worker")
		cfg := q.config(drModes[i%2])
		cfg.RepairInterval = 100 * time.Millisecond
		d, reg := drNew(t, worker, cfg, func(context.Context, string, drEvent) error { return nil })
		drStart(t, d)
		regs = append(regs, reg)
	}
	drWaitFor(t, 10*time.Second, "every broken partition delivered", func() bool { return q.sent(t) == broken })
	time.Sleep(500 * time.Millisecond) // more passes, which must find nothing
	total := 0.0
	for _, reg := range regs {
		total += drRepairs(t, reg, "missing_head")
	}
	require.Equal(t, float64(broken), total)
}

// pgdrain check, run as pgdrain_operator, reports a row no claim reaches (a dry run of
// outbox.repair, check "repair") with exit code 1 and changes nothing: the head stays missing and
// check reports it again. Once repaired, check is clean.
func TestCLI_CheckReportsRowsNoClaimReaches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, victim := drDamagedQueue(t, drDamage[0].sql)
	operator := loginURL(t, q.db, "pgdrain_operator")
	type report struct {
		OK       bool `json:"ok"`
		Problems []struct {
			Check   string  `json:"check"`
			Problem string  `json:"problem"`
			Name    *string `json:"name"`
			Detail  string  `json:"detail"`
		} `json:"problems"`
	}
	for range 2 {
		var r report
		runCLIJSON(t, cli.ExitProblems, &r, "check", "public.events", "--dsn", operator)
		require.False(t, r.OK)
		require.Len(t, r.Problems, 1, "%+v", r.Problems)
		p := r.Problems[0]
		require.Equal(t, "repair", p.Check)
		require.Equal(t, "missing_head", p.Problem)
		require.Equal(t, "victim", *p.Name)
		require.Contains(t, p.Detail, fmt.Sprintf("row %d", victim))
		require.Equal(t, int64(0), q.count(t, `SELECT count(*) FROM outbox.partition_heads WHERE partition_key = 'victim'`),
			"check is a dry run")
	}
	text := runCLI(t, "check", "public.events", "--dsn", operator)
	require.Equal(t, cli.ExitProblems, text.code, text.stderr)
	require.Contains(t, text.stdout, "missing_head")

	_, err := q.pool.Exec(ctx, `SELECT * FROM outbox.repair('public.events')`)
	require.NoError(t, err)
	var r report
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.events", "--dsn", operator)
	require.True(t, r.OK)
	text = runCLI(t, "check", "public.events", "--dsn", operator)
	require.Equal(t, cli.ExitOK, text.code, text.stderr)
	require.Contains(t, text.stdout, "a claim can reach every pending row")
}

// While claims rebuild the heads after a crash, outbox.repair checks nothing (keys no part has
// reached wait for their part), so its empty dry run vouched for them: pgdrain check said "a claim
// can reach every pending row". It now says the repair check was not run and how far the rebuild
// is (outbox.heads_rebuild, 00051: pgdrain_operator may not read the unlogged tables), then, once a
// claim has done the last part, checks again as before.
func TestCLI_CheckSaysClaimsRebuildTheHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
	_, err := q.pool.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'op', '{}', 'k' || g FROM generate_series(1, 50) g`)
	require.NoError(t, err)
	// The crash: PostgreSQL empties the unlogged tables.
	forgetHeadsAsACrashDoes(t, q.pool)
	operator := loginURL(t, q.db, "pgdrain_operator")

	text := runCLI(t, "check", "public.events", "--dsn", operator)
	require.Equal(t, cli.ExitOK, text.code, text.stderr)
	require.NotContains(t, text.stdout, "a claim can reach every pending row")
	require.Contains(t, text.stdout, "not checked: repair: claims are rebuilding the partition heads")
	require.Contains(t, text.stdout, "no part done yet")
	var r struct {
		OK      bool `json:"ok"`
		Skipped []struct {
			Check  string `json:"check"`
			Detail string `json:"detail"`
		} `json:"skipped"`
	}
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.events", "--dsn", operator)
	require.True(t, r.OK)
	skipped := map[string]string{}
	for _, s := range r.Skipped {
		skipped[s.Check] = s.Detail
	}
	require.Contains(t, skipped["repair"], "claims are rebuilding the partition heads", "%+v", r.Skipped)

	claimUntilHeadsBuilt(t, q.pool)
	text = runCLI(t, "check", "public.events", "--dsn", operator)
	require.Equal(t, cli.ExitOK, text.code, text.stderr)
	require.Contains(t, text.stdout, "a claim can reach every pending row")
	require.NotContains(t, text.stdout, "not checked: repair")
}

// outbox.wedged_partitions reads the heads, so while claims rebuild them `pgdrain wedged` lists no
// key no part has reached, and said "no partition ... has pending work older than ..." of a queue
// whose every key waited. It now says the heads are being rebuilt (on stderr with --json, whose
// stdout stays the list), and nothing once they are built.
func TestCLI_WedgedSaysClaimsRebuildTheHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
	_, err := q.pool.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id, created_at)
		SELECT 'op', '{}', 'k' || g, now() - interval '1 hour' FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	// The crash: PostgreSQL empties the unlogged tables (after the producer's commit step made the heads).
	forgetHeadsAsACrashDoes(t, q.pool)
	operator := loginURL(t, q.db, "pgdrain_operator")

	text := runCLI(t, "wedged", "public.events", "--dsn", operator)
	require.Equal(t, cli.ExitOK, text.code, "%s\n%s", text.stdout, text.stderr)
	require.Contains(t, text.stdout, "note: claims are rebuilding the partition heads of public.events")
	require.Contains(t, text.stdout, "no part done yet")
	js := runCLI(t, "wedged", "public.events", "--dsn", operator, "--json")
	require.Equal(t, cli.ExitOK, js.code, js.stderr)
	require.JSONEq(t, `[]`, js.stdout)
	require.Contains(t, js.stderr, "claims are rebuilding the partition heads")

	claimUntilHeadsBuilt(t, q.pool)
	text = runCLI(t, "wedged", "public.events", "--dsn", operator)
	require.Equal(t, cli.ExitProblems, text.code, "the keys are listed once their heads are back: %s", text.stderr)
	require.Contains(t, text.stdout, "k5")
	require.NotContains(t, text.stdout, "rebuilding")
	require.NotContains(t, text.stderr, "rebuilding")
}

// forgetHeadsAsACrashDoes empties the partition heads and their built-marks of every queue, as a
// crash does (PostgreSQL empties unlogged tables at recovery): claims then rebuild them in parts.
func forgetHeadsAsACrashDoes(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `DELETE FROM outbox.partition_heads; DELETE FROM outbox.partition_heads_built`)
	require.NoError(t, err)
}

// claimUntilHeadsBuilt claims until the claims' parts have rebuilt the heads of public.events: a
// part ends after 50 ms, so on a slow machine even a small queue may take two.
func claimUntilHeadsBuilt(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for range 100 {
		var rebuilding bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT rebuilding FROM outbox.heads_rebuild('public.events')`).Scan(&rebuilding))
		if !rebuilding {
			return
		}
		_, err := pool.Exec(ctx, `SELECT count(*) FROM outbox.claim_batch('public.events', 1)`) // a part commits with its claim
		require.NoError(t, err)
	}
	t.Fatal("the heads are still being rebuilt after 100 claims")
}

// outbox.stats counts a rebuild's unreached keys as pending and ready, though no claim takes them
// before their part: `pgdrain stats` says the heads are being rebuilt (and, with --json,
// heads_rebuild), and nothing once they are built.
func TestCLI_StatsSaysClaimsRebuildTheHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
	_, err := q.pool.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'op', '{}', 'k' || g FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	forgetHeadsAsACrashDoes(t, q.pool)
	reader := loginURL(t, q.db, "pgdrain_reader")

	text := runCLI(t, "stats", "public.events", "--dsn", reader)
	require.Equal(t, cli.ExitOK, text.code, text.stderr)
	require.Contains(t, text.stdout, "heads_rebuild")
	require.Contains(t, text.stdout, "no part done yet: keys no part has reached wait for their part")
	var s struct {
		Pending      int64   `json:"pending"`
		HeadsRebuild *string `json:"heads_rebuild"`
	}
	runCLIJSON(t, cli.ExitOK, &s, "stats", "public.events", "--dsn", reader)
	require.EqualValues(t, 5, s.Pending)
	require.NotNil(t, s.HeadsRebuild)
	require.Equal(t, "no part done yet", *s.HeadsRebuild)

	claimUntilHeadsBuilt(t, q.pool)
	text = runCLI(t, "stats", "public.events", "--dsn", reader)
	require.Equal(t, cli.ExitOK, text.code, text.stderr)
	require.NotContains(t, text.stdout, "heads_rebuild")
	runCLIJSON(t, cli.ExitOK, &s, "stats", "public.events", "--dsn", reader)
	require.Nil(t, s.HeadsRebuild)
}
