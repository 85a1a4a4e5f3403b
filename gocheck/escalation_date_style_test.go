package gocheck

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// The escalation engine through a pool that reads results as text (default_query_exec_mode exec,
// as docs/pgbouncer.md asks behind a transaction pooler), with a role's DateStyle of another
// order ('SQL, DMY'): every take failed to scan leased_until after leasing its steps, so no step
// was ever delivered (as the drainer's claims did, TestDrainer_TextResultsUnderUnusualDateAndIntervalStyles).
// Its times now come back as integer microseconds.
func TestEscalation_TextResultsUnderAnotherDateStyle(t *testing.T) {
	t.Parallel()
	for _, style := range []string{"SQL, DMY", "German"} {
		t.Run(style, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			cfg, err := pgxpool.ParseConfig(db.URL)
			require.NoError(t, err)
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
			cfg.ConnConfig.RuntimeParams["DateStyle"] = style
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			_, err = db.Pool.Exec(context.Background(), `
				SELECT alr.start_escalation(alr.add_alert('date style'),
				       alr.create_policy('date style', '[{"delay": "0s", "channel": "test", "target": "a"}]'))`)
			require.NoError(t, err)

			peer := &escCounter{n: map[string]int{}}
			logBuf := &syncBuffer{}
			e, err := escalation.New(pool, map[string]escalation.Notifier{"test": peer}, escalation.Config{
				Tick: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			require.Eventually(t, func() bool { return len(journal(t, db.Pool)) == 1 }, 20*time.Second, 25*time.Millisecond,
				"the step delivered and journaled; engine log:\n%s", logBuf.String())
			cancel()
			require.NoError(t, <-done)
			require.NotContains(t, logBuf.String(), "level=ERROR")
		})
	}
}
