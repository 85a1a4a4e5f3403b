package gocheck

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// A TxApplier writes in the claim transaction: when it fails, nothing it wrote stays and no row is
// recorded or counted as an attempt; when it succeeds, its writes and the rows' results commit
// together. A transaction claims again in itself while rows come (for up to
// drainer.TxApplierRounds), so a busy key may move several events per transaction, in order.
// Lease mode refuses it.
func TestDrainerTxApplier_WritesWithTheResultsOrNotAtAll(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	ctx := context.Background()
	_, err := q.pool.Exec(ctx, `CREATE TABLE public.applied (n serial, tx bigint, key text, seq int)`)
	require.NoError(t, err)
	for seq := range 5 {
		q.enqueue(t, "busy", "op", seq)
	}
	for seq := range 3 {
		q.enqueue(t, "calm", "op", seq)
	}

	var calls atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
		for _, e := range batch {
			p, err := drDecode(e.Payload)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO public.applied (tx, key, seq) VALUES (txid_current(), $1, $2)`, p.Key, p.Seq); err != nil {
				return err
			}
		}
		if calls.Add(1) == 1 {
			return errors.New("the first batch fails after writing")
		}
		return nil
	}
	cfg := q.config(drainer.ClaimLock)
	cfg.BatchSize, cfg.ApplyConcurrency = 8, 8
	_, err = drainer.New(q.pool, drainer.Config{Table: q.table}, drDecode, nil, drainer.WithTxApplier[drEvent](apply))
	require.EqualError(t, err, "WithTxApplier needs ClaimMode ClaimLock: it writes in the claim transaction")
	d, err := drainer.New(q.pool, cfg, drDecode, nil, drainer.WithTxApplier[drEvent](apply), drainer.WithLogger[drEvent](drLogger(t)))
	require.NoError(t, err)
	stop := drStart(t, d)
	drWaitFor(t, 30*time.Second, "every row sent", func() bool { return q.sent(t) == 8 })
	require.NoError(t, stop())

	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count > 0`), "a failed TxApplier counts no attempt")
	rows, err := q.pool.Query(ctx, `SELECT key, seq FROM public.applied ORDER BY n`)
	require.NoError(t, err)
	seqs := map[string][]int{}
	var key string
	var seq int
	_, err = pgx.ForEachRow(rows, []any{&key, &seq}, func() error {
		seqs[key] = append(seqs[key], seq)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, map[string][]int{"busy": {0, 1, 2, 3, 4}, "calm": {0, 1, 2}}, seqs,
		"each event written once (the failed batch's writes rolled back), each key in order")
	// Rounds go on for drainer.TxApplierRounds: on an idle machine the five rounds the busy key
	// needs fit in one transaction; a loaded one may take two or three.
	t.Logf("8 events in %d transaction(s)", q.count(t, `SELECT count(DISTINCT tx) FROM public.applied`))
}
