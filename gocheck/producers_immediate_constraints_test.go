package gocheck

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// SET CONSTRAINTS ALL IMMEDIATE, which ORMs and migration tools issue, used to run the commit step
// at the end of every producing statement and keep its commit locks to the end of the transaction:
// A writes alpha, B writes beta, A writes beta (waited for B), B writes alpha: "deadlock detected"
// (issue 29). The commit step now defers itself to COMMIT. As pgdrain_producer with a lock_timeout,
// in READ COMMITTED and SERIALIZABLE (where A, overtaken, fails at COMMIT with 40001 as documented
// and its retry commits): no statement waits, no deadlock, and each key is delivered in
// commit order (B committed first, so B's row of each key comes first, although A wrote alpha first).
func TestProducers_ImmediateConstraintsNeverDeadlock(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			db := orderQueue(t)
			ctx := context.Background()
			producer := loginPool(t, db, "pgdrain_producer")
			begin := func() pgx.Tx {
				tx, err := producer.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
				require.NoError(t, err)
				t.Cleanup(func() { _ = tx.Rollback(ctx) })
				_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '1s'`)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
				require.NoError(t, err)
				return tx
			}
			write := func(tx pgx.Tx, who, key string) {
				t.Helper()
				_, err := tx.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id)
					VALUES ('e', jsonb_build_object('tx', $1::text), $2)`, who, key)
				require.NoError(t, err, "%s writes %s: no producer waits for another's transaction", who, key)
			}
			a, b := begin(), begin()
			write(a, "A", "alpha")
			write(b, "B", "beta")
			write(a, "A", "beta")
			write(b, "B", "alpha")
			require.NoError(t, b.Commit(ctx))
			err := a.Commit(ctx)
			if iso == pgx.Serializable {
				// A read the clocks before B committed: documented 40001, and the retry commits.
				code, _ := sqlState(err)
				require.Equal(t, "40001", code, "%v", err)
				a = begin()
				write(a, "A", "alpha")
				write(a, "A", "beta")
				err = a.Commit(ctx)
			}
			require.NoError(t, err)

			require.Len(t, drainOnce(t, db.Pool), 4)
			rows, err := db.Pool.Query(ctx, `SELECT resource_id, string_agg(payload->>'tx', '' ORDER BY id)
				FROM public.events GROUP BY 1 ORDER BY 1`)
			require.NoError(t, err)
			order := map[string]string{}
			for rows.Next() {
				var key, txs string
				require.NoError(t, rows.Scan(&key, &txs))
				order[key] = txs
			}
			require.NoError(t, rows.Err())
			require.Equal(t, map[string]string{"alpha": "BA", "beta": "BA"}, order, "commit order per key")
		})
	}
}
