package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A lock-mode batch that recorded one key (rk) in two calls moved rk's head twice in its open
// transaction (ordering.md, 00040). Beside it, producers under SET CONSTRAINTS ALL IMMEDIATE (as
// ORMs and migration tools issue it) and producers writing many keys in one transaction, rk among
// them, as pgdrain_producer with lock_timeout = 1s (a wait fails them with 55P03), commit while the
// batch is open. Afterwards every row is delivered once, rk's in commit order, and repair (dry run)
// finds nothing.
func TestProducers_ImmediateAndManyKeyProducersNeverWaitForABatchThatRecordedAKeyTwice(t *testing.T) {
	t.Parallel()
	type recording struct {
		name string
		// record runs in the open batch, after rk's three rows were committed; it returns the rows
		// of rk the batch recorded as sent, in order.
		record func(t *testing.T, batch pgx.Tx, rk []int64) []int64
	}
	settleOne := func(t *testing.T, batch pgx.Tx, id int64, outcome string) {
		t.Helper()
		_, err := batch.Exec(context.Background(), `SELECT outbox.settle_locked('public.events', ARRAY[$1::bigint], ARRAY[$2])`, id, outcome)
		require.NoError(t, err)
	}
	recordings := []recording{
		{"a run settled sent twice", func(t *testing.T, batch pgx.Tx, rk []int64) []int64 {
			require.Equal(t, rk, claimLockedRunsOf(t, batch, "rk"), "the run takes rk's three rows")
			settleOne(t, batch, rk[0], "sent")
			settleOne(t, batch, rk[1], "sent")
			return rk[:2]
		}},
		{"a run settled sent then permanent", func(t *testing.T, batch pgx.Tx, rk []int64) []int64 {
			require.Equal(t, rk, claimLockedRunsOf(t, batch, "rk"), "the run takes rk's three rows")
			settleOne(t, batch, rk[0], "sent")
			settleOne(t, batch, rk[1], "permanent") // poisoned: skipped by rk's order
			return rk[:1]
		}},
		{"two claim_locked rounds, each settled", func(t *testing.T, batch pgx.Tx, rk []int64) []int64 {
			for round := 0; round < 2; round++ {
				ids := claimLocked(t, batch, 1)
				require.Equal(t, []int64{rk[round]}, ids, "round %d claims rk's next row", round)
				settleOne(t, batch, ids[0], "sent")
			}
			return rk[:2]
		}},
	}
	for _, rc := range recordings {
		t.Run(rc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := orderQueue(t)
			owner := loginAs(t, db, "pgdrain_producer")
			// rk's rows (ids in commit order) are the smallest: the batch's claims reach rk first.
			committed := map[string][]int64{}
			for range 3 {
				committed["rk"] = append(committed["rk"], insertEvent(t, owner, "rk"))
			}
			for i := range 5 {
				k := fmt.Sprintf("k%d", i)
				committed[k] = append(committed[k], insertEvent(t, owner, k))
			}

			batch, err := loginAs(t, db, "pgdrain_worker").Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = batch.Rollback(ctx) }()
			recorded := rc.record(t, batch, committed["rk"])
			poisoned := map[int64]bool{}
			if rc.name == "a run settled sent then permanent" {
				poisoned[committed["rk"][1]] = true
			}

			producer := lockTimeout1s(t, loginAs(t, db, "pgdrain_producer"))
			type write struct {
				what      string
				immediate bool
				// statements: the keys each INSERT statement writes (one multi-row INSERT each).
				statements [][]string
			}
			many := func(prefix string, n int) []string {
				keys := []string{"rk"}
				for i := range n {
					keys = append(keys, fmt.Sprintf("%s%d", prefix, i))
				}
				return keys
			}
			writes := []write{
				{"an ALL IMMEDIATE producer of rk", true, [][]string{{"rk"}}},
				{"an ALL IMMEDIATE producer of rk, then another key, then rk", true, [][]string{{"rk"}, {"k1"}, {"rk"}}},
				{"an ALL IMMEDIATE producer of rk and a new key in one statement", true, [][]string{{"rk", "n0"}}},
				{"a producer of 200 keys in one statement", false, [][]string{many("m", 199)}},
				{"a producer of 40 keys in 40 statements", false, func() [][]string {
					var s [][]string
					for _, k := range many("s", 39) {
						s = append(s, []string{k})
					}
					return s
				}()},
				{"an ALL IMMEDIATE producer of 200 keys in one statement", true, [][]string{many("i", 199)}},
				{"an ALL IMMEDIATE producer of existing keys in reverse order", true, [][]string{{"k4", "k3", "k2", "k1", "k0", "rk"}}},
			}
			// Each row written beside the batch carries its place in commit order (seq): rk's rows
			// must be delivered in it, whatever ids they were given.
			seq := 0
			written := map[string][]int{}
			for _, w := range writes {
				tx, err := producer.Begin(ctx)
				require.NoError(t, err)
				if w.immediate {
					_, err = tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
					require.NoError(t, err)
				}
				for _, stmt := range w.statements {
					seqs := make([]int, len(stmt))
					for i, k := range stmt {
						seq++
						seqs[i] = seq
						written[k] = append(written[k], seq)
					}
					_, err := tx.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id)
						SELECT 'e', jsonb_build_object('seq', s), k FROM unnest($1::text[], $2::int[]) WITH ORDINALITY u(k, s, n) ORDER BY n`,
						stmt, seqs)
					require.NoError(t, err, "%s: an INSERT waited: %s", w.what, waitDetail(err))
				}
				err = tx.Commit(ctx)
				require.NoError(t, err, "%s committed without waiting for the batch: %s", w.what, waitDetail(err))
			}
			require.NoError(t, batch.Commit(ctx))

			delivered := drainInOrder(t, db)
			delivered["rk"] = append(append([]int64(nil), recorded...), delivered["rk"]...)
			// What was committed before the batch, by id; what was written beside it, by seq.
			var seqOf = map[int64]int{}
			rows, err := db.Pool.Query(ctx, `SELECT id, (payload->>'seq')::int FROM public.events WHERE payload ? 'seq'`)
			require.NoError(t, err)
			var id int64
			var s int
			_, err = pgx.ForEachRow(rows, []any{&id, &s}, func() error { seqOf[id] = s; return nil })
			require.NoError(t, err)
			type row struct {
				ID  int64
				Seq int
			}
			got, want := map[string][]row{}, map[string][]row{}
			for k, ids := range delivered {
				for _, id := range ids {
					got[k] = append(got[k], row{id, seqOf[id]})
				}
			}
			for k, ids := range committed {
				for _, id := range ids {
					if !poisoned[id] {
						want[k] = append(want[k], row{id, 0})
					}
				}
			}
			for k, seqs := range written {
				for _, s := range seqs {
					want[k] = append(want[k], row{0, s})
				}
			}
			// Rows written beside the batch: compared by seq (their ids may have been renumbered).
			for k := range got {
				for i := range got[k] {
					if got[k][i].Seq != 0 {
						got[k][i].ID = 0
					}
				}
			}
			require.Equal(t, want, got, "every row delivered once, per key in commit order")
			requireRepairFindsNothing(t, db)
		})
	}
}

// claimLockedRunsOf locks runs of up to 8 rows per partition in batch and returns those of key.
func claimLockedRunsOf(t *testing.T, batch pgx.Tx, key string) []int64 {
	t.Helper()
	return claimedIDs(t, batch, `SELECT id FROM outbox.claim_locked_runs('public.events', 8, 8) WHERE partition_key = $1 ORDER BY id`, key)
}
