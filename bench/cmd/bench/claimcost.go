package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Section 1: what one claim_batch(queue, 32) costs, in shared buffers and milliseconds, against
// backlog depth and in each hostile state of invariant 6; seed 001's claim (its predicate over
// the two required indexes) is measured beside it on the same rows.

const seedClaimSQL = `
CREATE OR REPLACE FUNCTION public.seed_claim(q regclass, n integer) RETURNS SETOF bigint
LANGUAGE plpgsql AS $f$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id FROM %1$s t
     WHERE t.sent_at IS NULL AND t.attempt_count < 10
       AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= now())
       AND (t.leased_until IS NULL OR t.leased_until <= now())
       AND NOT EXISTS (SELECT 1 FROM %1$s p WHERE p.resource_id = t.resource_id AND p.id < t.id
                                             AND p.sent_at IS NULL AND p.attempt_count < 10)
     ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED', q) USING n;
END $f$`

// claimSample is one measured claim.
type claimSample struct {
	buffers float64
	ms      float64
	rows    int
}

// explainClaim runs EXPLAIN (ANALYZE, BUFFERS) of sql in a transaction it rolls back.
func explainClaim(ctx context.Context, pool *pgxpool.Pool, sql string) (claimSample, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return claimSample{}, err
	}
	defer tx.Rollback(ctx)
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql).Scan(&raw); err != nil {
		return claimSample{}, err
	}
	var out []struct {
		Plan struct {
			Hit  float64 `json:"Shared Hit Blocks"`
			Read float64 `json:"Shared Read Blocks"`
			Rows int     `json:"Actual Rows"`
		} `json:"Plan"`
		Time float64 `json:"Execution Time"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return claimSample{}, err
	}
	return claimSample{buffers: out[0].Plan.Hit + out[0].Plan.Read, ms: out[0].Time, rows: out[0].Plan.Rows}, nil
}

// measure warms the session up once and returns runs samples of sql.
func measure(ctx context.Context, pool *pgxpool.Pool, sql string, runs int) ([]claimSample, error) {
	if _, err := explainClaim(ctx, pool, sql); err != nil {
		return nil, err
	}
	var out []claimSample
	for range runs {
		s, err := explainClaim(ctx, pool, sql)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// claimState is one queue state to measure.
type claimState struct {
	name  string
	depth int // pending rows, for the chart (0 = not on the depth axis)
	setup func(ctx context.Context, pool *pgxpool.Pool, q string) error
}

func insertSQL(q string, n int, key string) string {
	return fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
		SELECT 'evt', jsonb_build_object('n', g, 'pad', repeat('x', 80)), %s FROM generate_series(1, %d) g`, q, key, n)
}

// settleFill ends every fill that a measurement starts from: a CHECKPOINT writes the fill's pages
// now, so the measured drain does not share the disk with their writeback. On the 2-core VM a
// checkpoint that came due during a measurement stalled its commits (drains and relays ran at a
// few hundred events/s for about a minute: the relay section of 2026-12-05).
const settleFill = "CHECKPOINT"

func execAll(ctx context.Context, pool *pgxpool.Pool, sqls ...string) error {
	for _, s := range sqls {
		if _, err := pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", strings.SplitN(strings.TrimSpace(s), "\n", 2)[0], err)
		}
	}
	return nil
}

func createQueue(ctx context.Context, pool *pgxpool.Pool, q string, extra string) error {
	_, err := pool.Exec(ctx, fmt.Sprintf("SELECT outbox.create_queue('%s', 'resource_id'%s)", q, extra))
	return err
}

func depthState(depth int) claimState {
	return claimState{name: fmt.Sprintf("depth %d", depth), depth: depth,
		setup: func(ctx context.Context, pool *pgxpool.Pool, q string) error {
			return execAll(ctx, pool, insertSQL(q, depth, fmt.Sprintf("'key-' || (g %% %d)", max(depth/6, 1))), "ANALYZE "+q)
		}}
}

// settleAll claims every head once (batch 10000) and records outcome for all of them.
func settleAll(ctx context.Context, pool *pgxpool.Pool, q, outcome string) error {
	_, err := pool.Exec(ctx, fmt.Sprintf("SELECT count(*) FROM outbox.claim_batch('%s', 10000)", q))
	if err != nil {
		return err
	}
	// The leases just taken are recorded in a second statement, so the claim's writes are visible.
	_, err = pool.Exec(ctx, fmt.Sprintf(`SELECT count(*) FROM outbox.apply_results('%[1]s',
		(SELECT array_agg(id ORDER BY id) FROM %[1]s WHERE lease_token IS NOT NULL),
		(SELECT array_agg(lease_token ORDER BY id) FROM %[1]s WHERE lease_token IS NOT NULL),
		(SELECT array_agg('%[2]s'::text) FROM %[1]s WHERE lease_token IS NOT NULL))`, q, outcome))
	return err
}

func hostileStates() []claimState {
	return []claimState{
		{name: "stale stats + decoy index, burst 8,600 rows / 1,439 keys", setup: func(ctx context.Context, pool *pgxpool.Pool, q string) error {
			return execAll(ctx, pool, fmt.Sprintf("ALTER TABLE %s SET (autovacuum_enabled = false)", q),
				fmt.Sprintf("CREATE INDEX ON %s (created_at) WHERE sent_at IS NULL", q), "ANALYZE "+q,
				insertSQL(q, 8_600, "'key-' || (g % 1439)"))
		}},
		{name: "hot keys 10 x 10,000, heads leased (empty claim)", setup: func(ctx context.Context, pool *pgxpool.Pool, q string) error {
			return execAll(ctx, pool, insertSQL(q, 100_000, "'key-' || (g % 10)"), "ANALYZE "+q,
				fmt.Sprintf("SELECT count(*) FROM outbox.claim_batch('%s', 32)", q))
		}},
		{name: "3,000 heads in backoff + 1,000 ready rows", setup: func(ctx context.Context, pool *pgxpool.Pool, q string) error {
			if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.create_queue('%s', 'resource_id', 10, '1 hour', '2 hours')", q),
				insertSQL(q, 9_000, "'key-' || (g % 3000)")); err != nil {
				return err
			}
			if err := settleAll(ctx, pool, q, "transient"); err != nil {
				return err
			}
			return execAll(ctx, pool, insertSQL(q, 1_000, "'fresh-' || (g % 166)"), "ANALYZE "+q)
		}},
		{name: "20,000 poisoned over 10,000 keys + 1,000 ready", setup: func(ctx context.Context, pool *pgxpool.Pool, q string) error {
			if err := execAll(ctx, pool, insertSQL(q, 20_000, "'key-' || (g % 10000)")); err != nil {
				return err
			}
			for range 2 {
				if err := settleAll(ctx, pool, q, "permanent"); err != nil {
					return err
				}
			}
			return execAll(ctx, pool, insertSQL(q, 1_000, "'fresh-' || (g % 166)"), "ANALYZE "+q)
		}},
		{name: "20,000 poisoned ahead of live rows in 10 keys + 1,000 ready", setup: func(ctx context.Context, pool *pgxpool.Pool, q string) error {
			return execAll(ctx, pool, insertSQL(q, 20_000, "'key-' || (g % 10)"),
				fmt.Sprintf("UPDATE %s SET attempt_count = 10, last_error = 'permanent'", q),
				fmt.Sprintf("SELECT outbox._rebuild_heads(queue_id) FROM outbox.queues WHERE queue = '%s'", q),
				insertSQL(q, 1_000, "'key-' || (g % 10)"), insertSQL(q, 1_000, "'fresh-' || (g % 166)"),
				"VACUUM ANALYZE "+q)
		}},
		{name: "consecutive keys 200 x 1,000", setup: func(ctx context.Context, pool *pgxpool.Pool, q string) error {
			return execAll(ctx, pool, insertSQL(q, 200_000, "'key-' || ((g - 1) / 1000)"), "ANALYZE "+q)
		}},
	}
}

// depthPoint is one point of the chart.
type depthPoint struct {
	depth         int
	pgdrain, seed float64 // median buffers
}

func benchClaimCost(ctx context.Context, o options, emit func(string)) error {
	pool, err := freshDatabase(ctx, o.server, "bench_claim", true, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, seedClaimSQL); err != nil {
		return err
	}
	var states []claimState
	for _, d := range []int{1_000, 10_000, 100_000, 1_000_000} {
		if d <= o.maxDepth {
			states = append(states, depthState(d))
		}
	}
	states = append(states, hostileStates()...)

	emit("## 1. Claim cost: one claim_batch(queue, 32), lease mode, partitioned queue\n\n")
	emit(fmt.Sprintf("Shared buffers (hit + read) and server execution time of one claim, rolled back; median (min–max) of %d runs after a warm-up. "+
		"Seed 001's claim is its predicate over the two required indexes, on the same rows (SELECT ... FOR UPDATE only, no lease written). "+
		"Depth rows: about 6 rows per key, freshly analyzed.\n\n", o.runs))
	emit("| state | pgdrain buffers | pgdrain ms | rows | seed 001 buffers | seed 001 ms |\n|---|---:|---:|---:|---:|---:|\n")
	var points []depthPoint
	for i, st := range states {
		q := fmt.Sprintf("public.claim_%d", i)
		if !strings.Contains(st.name, "backoff") {
			if err := createQueue(ctx, pool, q, ""); err != nil {
				return err
			}
		}
		if err := st.setup(ctx, pool, q); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		ours, err := measure(ctx, pool, fmt.Sprintf("SELECT * FROM outbox.claim_batch('%s', 32)", q), o.runs)
		if err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		seed, err := measure(ctx, pool, fmt.Sprintf("SELECT * FROM public.seed_claim('%s', 32)", q), o.runs)
		if err != nil {
			return fmt.Errorf("%s (seed): %w", st.name, err)
		}
		ob, oms := split(ours)
		sb, sms := split(seed)
		emit(fmt.Sprintf("| %s | %s | %s | %d | %s | %s |\n", st.name, ob.format("%.0f"), oms.format("%.2f"), ours[0].rows,
			sb.format("%.0f"), sms.format("%.2f")))
		if st.depth > 0 {
			points = append(points, depthPoint{depth: st.depth, pgdrain: ob.median, seed: sb.median})
		}
		if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", q)); err != nil {
			return err
		}
	}
	png := filepath.Join(o.out, "claim_cost.png")
	if err := writeChart(png, points); err != nil {
		return err
	}
	emit(fmt.Sprintf("\nChart: %s (x: backlog depth, log10, one gridline per decade from 1k; y: buffers per claim, log10, one gridline per decade from 10; "+
		"blue = pgdrain claim_batch, red = seed 001's claim).\n\n", png))
	return nil
}

// split summarizes the buffers and the milliseconds of samples.
func split(s []claimSample) (buffers, ms summary) {
	var b, m []float64
	for _, x := range s {
		b = append(b, x.buffers)
		m = append(m, x.ms)
	}
	return summarize(b), summarize(m)
}
