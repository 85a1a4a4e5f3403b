package gocheck

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// Two escalation engines (pgdrain_worker) work through a PgBouncer in transaction pooling mode
// that gives them one server connection between them, with pgx's exec modes that keep no prepared
// statement (docs/pgbouncer.md): every ladder completes and every step is delivered once. The
// engine keeps no session state: each statement is its own transaction.
func TestPgBouncer_EscalationEngine(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			workerURL := loginURL(t, db, "pgdrain_worker")
			b := startPgBouncer(t, db.URL, 1, urlUser(t, workerURL))
			pool := (&pgbSetup{b: b}).pool(t, workerURL, mode, 2)

			const ladders, steps = 30, 2
			_, err := db.Pool.Exec(context.Background(), `
				SELECT alr.start_escalation(alr.add_alert('alert ' || g), p.id)
				FROM (SELECT alr.create_policy('bouncer', '[{"delay": "0s", "channel": "test", "target": "a"},
				                                            {"delay": "200 milliseconds", "channel": "test", "target": "b"}]') AS id) p,
				     generate_series(1, $1) g`, ladders)
			require.NoError(t, err)

			peer := &escCounter{n: map[string]int{}}
			logBuf := &syncBuffer{}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("engine log:\n%s", logBuf.String())
				}
			})
			cfg := escalation.Config{BatchSize: 7, Tick: 50 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			runErrs := make(chan error, 2)
			defer func() { cancel(); wg.Wait() }()
			for range 2 {
				e, err := escalation.New(pool, map[string]escalation.Notifier{"test": peer}, cfg)
				require.NoError(t, err)
				wg.Go(func() { runErrs <- e.Run(ctx) })
			}
			// A ladder is completed when its last step is recorded, before that step is delivered
			// and journaled (at most once: record first): wait for the journal too.
			require.Eventually(t, func() bool {
				var n, journaled int
				_ = db.Pool.QueryRow(context.Background(),
					`SELECT (SELECT count(*) FROM alr.alert_escalations WHERE stop_reason = 'completed'),
					        (SELECT count(*) FROM alr.delivery_journal)`).Scan(&n, &journaled)
				return n == ladders && journaled == ladders*steps
			}, time.Minute, 25*time.Millisecond)
			counts := peer.counts()
			require.Len(t, counts, ladders*steps)
			for key, n := range counts {
				require.Equal(t, 1, n, "step %s delivered once", key)
			}
			require.Len(t, journal(t, db.Pool), ladders*steps)
			require.NotContains(t, logBuf.String(), "level=ERROR")
			cancel()
			wg.Wait()
			require.NoError(t, <-runErrs)
			require.NoError(t, <-runErrs)
		})
	}
}
