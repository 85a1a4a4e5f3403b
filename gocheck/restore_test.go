package gocheck

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// The queues of the restore tests: two partitioned ones, in a schema whose data pg_dump writes
// before outbox's and in one it writes after, and an unpartitioned one that notifies only while a
// drainer waits (its NOTIFY trigger reads the drainers' waiting sequence).
var restoreQueues = []struct {
	name, column string
}{
	{"app.orders", "k"},
	{"public.parcels", "k"},
	{"public.mail", ""},
}

// TestRestore_DumpAndRestoreKeepEveryQueueWorking: a database with partitioned and unpartitioned
// queues holding pending, leased, backing-off and poisoned rows goes through pg_dump -Fc and
// pg_restore into a new database (whole, in sections, and --schema-only followed by --data-only).
// With no step of pgdrain's own, producers (plain INSERT and enqueue, as pgdrain_producer) write to every queue,
// a worker (pgdrain_worker) drains everything in commit order per key, nothing is delivered twice,
// the poisoned rows stay poisoned until an operator (pgdrain_operator) requeues them, and then
// come last in their keys. Issue 30, item 1.
func TestRestore_DumpAndRestoreKeepEveryQueueWorking(t *testing.T) {
	for _, mode := range []string{"whole", "in sections", "schema-only then data-only"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			src := testdb.New(t)
			poisoned := restoreSource(t, src)

			dump := filepath.Join(t.TempDir(), "src.dump")
			pgTool(t, "pg_dump", "-Fc", "-f", dump, "-d", src.URL)
			dst := testdb.NewEmpty(t)
			switch mode {
			case "whole":
				pgTool(t, "pg_restore", "--exit-on-error", "-d", dst.URL, dump)
			case "in sections":
				for _, section := range []string{"pre-data", "data", "post-data"} {
					pgTool(t, "pg_restore", "--exit-on-error", "--section="+section, "-d", dst.URL, dump)
				}
			default:
				pgTool(t, "pg_restore", "--exit-on-error", "--schema-only", "-d", dst.URL, dump)
				pgTool(t, "pg_restore", "--exit-on-error", "--data-only", "-d", dst.URL, dump)
			}

			worker := loginAs(t, dst, "pgdrain_worker")
			operator := loginAs(t, dst, "pgdrain_operator")
			producer := loginAs(t, dst, "pgdrain_producer")
			for _, q := range restoreQueues {
				if q.column != "" {
					rows, err := worker.Query(ctx, `SELECT partition_key, cause FROM outbox.repair($1, true)`, q.name)
					require.NoError(t, err)
					found, err := pgx.CollectRows(rows, pgx.RowTo[string])
					require.NoError(t, err)
					require.Empty(t, found, "%s: the restored partition heads reach every pending row", q.name)
				}
			}
			// A drainer waits: the NOTIFY trigger of public.mail then reads its waiting sequence.
			var mark *int64
			require.NoError(t, worker.QueryRow(ctx, `SELECT outbox.drainer_waits('public.mail', '1 minute')`).Scan(&mark))

			// Producers after the restore: a plain INSERT and an enqueue per key, a new key too.
			for _, q := range restoreQueues {
				if q.column == "" {
					_, err := producer.Exec(ctx, `INSERT INTO public.mail (event_type, payload) VALUES ('m-7', '{}')`)
					require.NoError(t, err, "a plain INSERT into the restored unpartitioned queue")
					_, err = producer.Exec(ctx, `SELECT outbox.enqueue('public.mail', 'm-8', '{}')`)
					require.NoError(t, err)
					continue
				}
				for _, k := range []string{"a", "b", "c", "d", "e"} {
					_, err := producer.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, k) VALUES ($1, '{}', $2)`, q.name),
						k+"-5", k)
					require.NoError(t, err, "a plain INSERT into the restored partitioned queue %s", q.name)
					_, err = producer.Exec(ctx, `SELECT outbox.enqueue($1, $2, '{}', $3)`, q.name, k+"-6", k)
					require.NoError(t, err)
				}
			}

			want := map[string][]string{
				"a": {"a-2", "a-3", "a-4", "a-5", "a-6"}, // a-1 is poisoned
				"b": {"b-1", "b-2", "b-3", "b-4", "b-5", "b-6"},
				"c": {"c-1", "c-2", "c-3", "c-4", "c-5", "c-6"},
				"d": {"d-2", "d-3", "d-4", "d-5", "d-6"}, // d-1 was sent before the dump
				"e": {"e-5", "e-6"},
			}
			for _, q := range restoreQueues {
				got := restoreDrain(t, worker, q.name)
				if q.column == "" {
					require.ElementsMatch(t, []string{"m-2", "m-3", "m-4", "m-5", "m-6", "m-7", "m-8"}, got[""],
						"%s: every pending, leased and backing-off row and the new ones, once each", q.name)
					continue
				}
				require.Equal(t, want, got, "%s: every key drained in commit order, once each", q.name)
			}

			// The poisoned rows stayed poisoned; requeued, they come last in their keys.
			for _, q := range restoreQueues {
				var n int64
				require.NoError(t, worker.QueryRow(ctx, `SELECT poisoned FROM outbox.stats($1)`, q.name).Scan(&n))
				require.Equal(t, poisoned[q.name], n, "%s: poisoned rows are kept", q.name)
				require.NoError(t, operator.QueryRow(ctx, `SELECT outbox.requeue_poisoned($1)`, q.name).Scan(&n))
				require.Equal(t, poisoned[q.name], n, "%s: an operator requeues them", q.name)
				got := restoreDrain(t, worker, q.name)
				if q.column == "" {
					require.Equal(t, map[string][]string{"": {"m-1"}}, got, q.name)
				} else {
					require.Equal(t, map[string][]string{"a": {"a-1"}}, got, q.name)
				}
			}
		})
	}
}

// restoreSource fills src's queues (as producer, worker and operator would) and returns how many
// rows of each are poisoned. Per partitioned queue, keys a..d get a-1..a-4 etc.: a's head is
// poisoned, b's leased, c's backing off, d's sent; unpartitioned public.mail gets m-1..m-6: m-1
// poisoned, m-2 backing off, m-3 leased. Leases and backoffs run out a few seconds later.
func restoreSource(t *testing.T, src *testdb.DB) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	_, err := src.Pool.Exec(ctx, `CREATE SCHEMA app; GRANT USAGE ON SCHEMA app TO pgdrain_producer`)
	require.NoError(t, err)
	for _, q := range restoreQueues {
		if q.column == "" {
			_, err = src.Pool.Exec(ctx, `SELECT outbox.create_queue($1, max_attempts => 3)`, q.name)
		} else {
			_, err = src.Pool.Exec(ctx, `SELECT outbox.create_queue($1, $2, max_attempts => 3)`, q.name, q.column)
		}
		require.NoError(t, err)
	}
	producer := loginAs(t, src, "pgdrain_producer")
	worker := loginAs(t, src, "pgdrain_worker")
	for _, q := range restoreQueues {
		for i := 1; i <= 4; i++ {
			if q.column == "" && i <= 3 {
				_, err = producer.Exec(ctx, `INSERT INTO public.mail (event_type, payload) VALUES ($1, '{}'), ($2, '{}')`,
					fmt.Sprintf("m-%d", 2*i-1), fmt.Sprintf("m-%d", 2*i))
				require.NoError(t, err)
			}
			if q.column == "" {
				continue
			}
			for _, k := range []string{"a", "b", "c", "d"} {
				if i%2 == 1 {
					_, err = producer.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, k) VALUES ($1, '{}', $2)`, q.name),
						fmt.Sprintf("%s-%d", k, i), k)
				} else {
					_, err = producer.Exec(ctx, `SELECT outbox.enqueue($1, $2, '{}', $3)`, q.name, fmt.Sprintf("%s-%d", k, i), k)
				}
				require.NoError(t, err)
			}
		}
		rows, err := worker.Query(ctx, `SELECT id, lease_token, event_type FROM outbox.claim_batch($1, 3, '3 seconds')`, q.name)
		require.NoError(t, err)
		type claimed struct {
			id    int64
			token string
			typ   string
		}
		batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
			var c claimed
			err := r.Scan(&c.id, &c.token, &c.typ)
			return c, err
		})
		require.NoError(t, err)
		if q.column != "" {
			// Fresh rows of equal attempts come in id order: a-1, b-1, c-1; then d-1 alone.
			rows, err := worker.Query(ctx, `SELECT id, lease_token, event_type FROM outbox.claim_batch($1, 1, '3 seconds')`, q.name)
			require.NoError(t, err)
			more, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
				var c claimed
				err := r.Scan(&c.id, &c.token, &c.typ)
				return c, err
			})
			require.NoError(t, err)
			batch = append(batch, more...)
		}
		for _, c := range batch {
			var applied bool
			switch c.typ {
			case "a-1", "m-1":
				err = worker.QueryRow(ctx, `SELECT outbox.apply_result($1, $2, $3, 'permanent', 'rejected')`, q.name, c.id, c.token).Scan(&applied)
			case "c-1", "m-2":
				err = worker.QueryRow(ctx, `SELECT outbox.apply_result($1, $2, $3, 'transient', '503', pg_catalog.clock_timestamp() + interval '3 seconds')`,
					q.name, c.id, c.token).Scan(&applied)
			case "d-1":
				err = worker.QueryRow(ctx, `SELECT outbox.apply_result($1, $2, $3, 'sent')`, q.name, c.id, c.token).Scan(&applied)
			case "b-1", "m-3":
				continue // stays leased
			default:
				t.Fatalf("%s: unexpected claim of %s", q.name, c.typ)
			}
			require.NoError(t, err)
			require.True(t, applied, "%s: %s recorded", q.name, c.typ)
		}
	}
	poisoned := map[string]int64{}
	for _, q := range restoreQueues {
		var n int64
		require.NoError(t, src.Pool.QueryRow(ctx, `SELECT poisoned FROM outbox.stats($1)`, q.name).Scan(&n))
		poisoned[q.name] = n
	}
	require.Equal(t, map[string]int64{"app.orders": 1, "public.parcels": 1, "public.mail": 1}, poisoned)
	return poisoned
}

// restoreDrain claims and records 'sent' for everything the queue delivers (waiting out leases and
// backoffs, at most 30 s) and returns the event types delivered per key, in delivery order. Each
// claim takes one row per key, so delivery order within a key is claim order.
func restoreDrain(t *testing.T, worker *pgx.Conn, queue string) map[string][]string {
	t.Helper()
	ctx := context.Background()
	got := map[string][]string{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var (
			ids    []int64
			tokens []string
			typ    string
			key    string
			id     int64
			token  string
		)
		rows, err := worker.Query(ctx, `SELECT id, lease_token::text, event_type, coalesce(partition_key, '')
			FROM outbox.claim_batch($1, 100)`, queue)
		require.NoError(t, err)
		_, err = pgx.ForEachRow(rows, []any{&id, &token, &typ, &key}, func() error {
			ids = append(ids, id)
			tokens = append(tokens, token)
			got[key] = append(got[key], typ)
			return nil
		})
		require.NoError(t, err)
		if len(ids) > 0 {
			outcomes := make([]string, len(ids))
			for i := range outcomes {
				outcomes[i] = "sent"
			}
			var applied int
			require.NoError(t, worker.QueryRow(ctx, `SELECT count(*) FILTER (WHERE applied) FROM outbox.apply_results($1, $2, $3::uuid[], $4)`,
				queue, ids, tokens, outcomes).Scan(&applied))
			require.Equal(t, len(ids), applied, "%s: every result recorded", queue)
			continue
		}
		var pending int64
		require.NoError(t, worker.QueryRow(ctx, `SELECT pending FROM outbox.stats($1)`, queue).Scan(&pending))
		if pending == 0 {
			return got
		}
		require.True(t, time.Now().Before(deadline), "%s: %d rows still pending after 30 s, delivered so far: %v", queue, pending, got)
		time.Sleep(200 * time.Millisecond)
	}
}

// pgTool runs a PostgreSQL client program (pg_dump, pg_restore) of the server's major version,
// from PGDRAIN_PG_BINDIR or the Debian default, failing the test with its output when it fails.
func pgTool(t *testing.T, name string, args ...string) {
	t.Helper()
	bin := os.Getenv("PGDRAIN_PG_BINDIR")
	if bin == "" {
		bin = "/usr/lib/postgresql/15/bin"
	}
	out, err := osexec.Command(filepath.Join(bin, name), args...).CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
}
