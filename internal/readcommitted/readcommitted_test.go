package readcommitted_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/readcommitted"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// poolWithDefault returns a pool of a fresh database whose connections begin transactions in level.
func poolWithDefault(t *testing.T, level string) *pgxpool.Pool {
	t.Helper()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+
		` SET default_transaction_isolation = '`+level+`'`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `CREATE TABLE public.t (v int)`)
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

const isolation = `SELECT pg_catalog.current_setting('transaction_isolation')`

// Every way of sending a statement runs it in READ COMMITTED, whatever the connections' default,
// and a statement's writes are committed once its results are read.
func TestDB_StatementsRunInReadCommittedWhateverTheDefault(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"serializable", "repeatable read", "read committed"} {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := poolWithDefault(t, level)
			var plain string
			require.NoError(t, pool.QueryRow(ctx, isolation).Scan(&plain))
			require.Equal(t, level, plain, "the pool itself begins in the database's default")

			db := readcommitted.New(pool)
			got, err := db.Check(ctx)
			require.NoError(t, err)
			require.Equal(t, level, got)
			require.Equal(t, level != "read committed", db.Explicit())

			var viaRow string
			require.NoError(t, db.QueryRow(ctx, isolation).Scan(&viaRow))
			require.Equal(t, "read committed", viaRow, "QueryRow")

			rows, err := db.Query(ctx, `INSERT INTO public.t VALUES (1), (2) RETURNING pg_catalog.current_setting('transaction_isolation')`)
			require.NoError(t, err)
			levels, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Equal(t, []string{"read committed", "read committed"}, levels, "Query")

			_, err = db.Exec(ctx, `INSERT INTO public.t SELECT 3 WHERE pg_catalog.current_setting('transaction_isolation') = 'read committed'`)
			require.NoError(t, err)

			var b pgx.Batch
			b.Queue(isolation)
			b.Queue(`INSERT INTO public.t VALUES (4)`)
			res := db.SendBatch(ctx, &b)
			var viaBatch string
			require.NoError(t, res.QueryRow().Scan(&viaBatch))
			_, err = res.Exec()
			require.NoError(t, err)
			require.NoError(t, res.Close())
			require.Equal(t, "read committed", viaBatch, "SendBatch")

			tx, err := db.Begin(ctx)
			require.NoError(t, err)
			var viaTx string
			require.NoError(t, tx.QueryRow(ctx, isolation).Scan(&viaTx))
			require.NoError(t, tx.Rollback(ctx))
			require.Equal(t, "read committed", viaTx, "Begin")

			var values []int
			rows, err = pool.Query(ctx, `SELECT v FROM public.t ORDER BY v`)
			require.NoError(t, err)
			values, err = pgx.CollectRows(rows, pgx.RowTo[int])
			require.NoError(t, err)
			require.Equal(t, []int{1, 2, 3, 4}, values, "every write committed")
			require.Zero(t, pool.Stat().AcquiredConns(), "no connection left in a transaction")
		})
	}
}

// A statement that fails writes nothing and leaves no connection in a transaction, however it is
// sent; a Query whose rows are closed early still ends its transaction.
func TestDB_AFailedStatementWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := poolWithDefault(t, "serializable")
	db := readcommitted.New(pool)
	_, err := db.Check(ctx)
	require.NoError(t, err)
	require.True(t, db.Explicit())

	const failing = `INSERT INTO public.t SELECT 1 / (g - 2) FROM pg_catalog.generate_series(1, 3) g RETURNING v`
	rows, err := db.Query(ctx, failing)
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
	}
	require.ErrorContains(t, err, "division by zero", "Query")
	require.ErrorContains(t, db.QueryRow(ctx, failing).Scan(new(int)), "division by zero", "QueryRow")
	_, err = db.Exec(ctx, failing)
	require.ErrorContains(t, err, "division by zero", "Exec")
	var b pgx.Batch
	b.Queue(`INSERT INTO public.t VALUES (7)`)
	b.Queue(failing)
	require.ErrorContains(t, db.SendBatch(ctx, &b).Close(), "division by zero", "SendBatch")

	rows, err = db.Query(ctx, `SELECT g FROM pg_catalog.generate_series(1, 1000) g`)
	require.NoError(t, err)
	require.True(t, rows.Next())
	rows.Close()
	require.NoError(t, rows.Err())

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM public.t`).Scan(&n))
	require.Zero(t, n, "nothing written")
	require.Zero(t, pool.Stat().AcquiredConns(), "no connection left in a transaction")
	var idleInTx int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
		WHERE datname = pg_catalog.current_database() AND state LIKE 'idle in transaction%'`).Scan(&idleInTx))
	require.Zero(t, idleInTx)
}
