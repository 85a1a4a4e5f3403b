package gocheck

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// resultTracer keeps the statements (and their arguments) that record lease-mode results.
type resultTracer struct {
	mu    sync.Mutex
	calls []pgx.TraceQueryStartData
}

func (r *resultTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "outbox.apply_results") {
		r.mu.Lock()
		r.calls = append(r.calls, data)
		r.mu.Unlock()
	}
	return ctx
}

func (r *resultTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Config.AsyncResults: a lease-mode drainer records its results in transactions that commit with
// synchronous_commit off (the statement it sends sets it for its transaction, which the server
// confirms when the same statement runs in an open transaction), and every row is still recorded;
// without it the setting is left alone.
func TestDrainer_AsyncResultsCommitWithoutWaitingForTheirFlush(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{true, false} {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
		for i := range 20 {
			q.enqueue(t, string(rune('a'+i%5)), "op", i)
		}
		pcfg, err := pgxpool.ParseConfig(q.db.URL)
		require.NoError(t, err)
		tracer := &resultTracer{}
		pcfg.ConnConfig.Tracer = tracer
		pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
		require.NoError(t, err)
		defer pool.Close()

		cfg := q.config(drainer.ClaimLease)
		cfg.AsyncResults = async
		d, _ := drNew(t, pool, cfg, func(context.Context, string, drEvent) error { return nil })
		stop := drStart(t, d)
		require.Eventually(t, func() bool { return q.sent(t) == 20 }, 20*time.Second, 20*time.Millisecond,
			"every row recorded (AsyncResults %v)", async)
		require.NoError(t, stop())

		tracer.mu.Lock()
		calls := tracer.calls
		tracer.mu.Unlock()
		require.NotEmpty(t, calls)
		for _, c := range calls {
			require.Equal(t, async, strings.Contains(c.SQL, "synchronous_commit"), "AsyncResults %v: %s", async, c.SQL)
		}
		// The statement as sent, replayed in an open transaction (its tokens are spent: it records
		// nothing), leaves that transaction committing asynchronously.
		tx, err := q.pool.Begin(context.Background())
		require.NoError(t, err)
		_, err = tx.Exec(context.Background(), `SET LOCAL synchronous_commit = on`) // whatever the server's default
		require.NoError(t, err)
		rows, err := tx.Query(context.Background(), calls[0].SQL, calls[0].Args...)
		require.NoError(t, err)
		rows.Close()
		require.NoError(t, rows.Err())
		var setting string
		require.NoError(t, tx.QueryRow(context.Background(), `SHOW synchronous_commit`).Scan(&setting))
		require.NoError(t, tx.Rollback(context.Background()))
		want := "on"
		if async {
			want = "off"
		}
		require.Equal(t, want, setting, "AsyncResults %v", async)
	}
}
