package gocheck

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// The example workers of examples/ (plain psql + bash, and Python with psycopg2) drain a
// partitioned queue through the SQL functions only. Each test runs two copies of a worker at once
// against a peer that fails two events transiently once and rejects one malformed event, and
// checks that every other row ends up sent, delivered exactly once, in id order per key, and that
// the malformed one is poisoned with the peer's error.

const (
	exampleEvents = 60
	exampleKeys   = 6
	// exampleMalformed is rejected permanently; exampleFlaky fail once, transiently.
	exampleMalformed = 20
)

var exampleFlaky = []int64{7, 13}

// exampleDelivery is one successful delivery seen by the peer.
type exampleDelivery struct {
	id  int64
	key string
}

func exampleQueue(t *testing.T, db *testdb.DB, queue string) {
	t.Helper()
	cliExec(t, db.Pool, `SELECT outbox.create_queue($1, 'account_id', backoff_min => '10 milliseconds', backoff_max => '50 milliseconds')`, queue)
	cliExec(t, db.Pool, fmt.Sprintf(`INSERT INTO %s (event_type, payload, account_id)
		SELECT 'account.changed',
		       CASE WHEN g = $1 THEN '{"malformed": true}'::jsonb
		            WHEN g = ANY ($2) THEN jsonb_build_object('n', g, 'flaky', true)
		            ELSE jsonb_build_object('n', g) END,
		       'acct-' || (g %% $3)
		FROM generate_series(1, $4) g ORDER BY g`, queue),
		exampleMalformed, exampleFlaky, exampleKeys, exampleEvents)
}

// runExampleWorkers starts n copies of cmd (built by mk) and waits for all of them to exit 0.
func runExampleWorkers(t *testing.T, n int, mk func(ctx context.Context) *osexec.Cmd) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		cmd := mk(ctx)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		wg.Go(func() {
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("%s: %w\n%s", cmd.Path, err, out.String())
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

// requireExampleDrained checks the queue rows and the peer's deliveries.
func requireExampleDrained(t *testing.T, db *testdb.DB, queue string, delivered []exampleDelivery) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, fmt.Sprintf(
		`SELECT id, sent_at IS NOT NULL, attempt_count, COALESCE(last_error, ''), lease_token IS NULL FROM %s ORDER BY id`, queue))
	require.NoError(t, err)
	defer rows.Close() // a failed check must not leave the connection taken (the pool's Close would wait for ever)
	n := 0
	for rows.Next() {
		var id int64
		var sent, free bool
		var attempts int
		var lastError string
		require.NoError(t, rows.Scan(&id, &sent, &attempts, &lastError, &free))
		n++
		require.True(t, free, "row %d still leased", id)
		switch {
		case id == exampleMalformed:
			require.False(t, sent, "the malformed event is never sent")
			require.Equal(t, 10, attempts, "the malformed event is poisoned (attempt_count = max_attempts)")
			require.Contains(t, lastError, "422")
		case id == exampleFlaky[0] || id == exampleFlaky[1]:
			require.True(t, sent, "flaky row %d is sent after its retry", id)
			require.Equal(t, 1, attempts, "flaky row %d failed once", id)
			require.Empty(t, lastError, "flaky row %d: a sent row keeps no error (00025)", id)
		default:
			require.True(t, sent, "row %d is sent", id)
			require.Equal(t, 0, attempts, "row %d was sent at the first attempt", id)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, exampleEvents, n)

	seen := map[int64]int{}
	last := map[string]int64{}
	for _, d := range delivered {
		seen[d.id]++
		require.Greater(t, d.id, last[d.key], "key %s: event %d delivered after event %d", d.key, d.id, last[d.key])
		last[d.key] = d.id
		require.Equal(t, fmt.Sprintf("acct-%d", d.id%exampleKeys), d.key)
	}
	require.Len(t, seen, exampleEvents-1, "every event but the malformed one is delivered")
	for id, times := range seen {
		require.Equal(t, 1, times, "event %d delivered %d times", id, times)
	}
}

// exampleDeliverScript is the DELIVER_CMD of the psql worker's test: the same peer as the Python
// test's webhook, as a bash script writing to files in dir.
const exampleDeliverScript = `#!/usr/bin/env bash
payload=$(cat)
case "$payload" in
  *malformed*) echo "HTTP 422: malformed payload" >&2; exit 65 ;;
  *flaky*) if [ ! -e "$PEER_DIR/failed_$EVENT_ID" ]; then
             : > "$PEER_DIR/failed_$EVENT_ID"; echo "HTTP 503: try later" >&2; exit 75
           fi ;;
esac
echo "$EVENT_ID $PARTITION_KEY" >> "$PEER_DIR/delivered"
`

func TestExamples_PsqlWorkerDrainsTheQueue(t *testing.T) {
	t.Parallel()
	psql, err := osexec.LookPath("psql")
	require.NoError(t, err, "psql is needed (scripts/ensure-deps.sh installs it)")
	require.NotEmpty(t, psql)
	db := testdb.New(t)
	queue := "public.example_psql"
	exampleQueue(t, db, queue)

	dir := t.TempDir()
	deliver := filepath.Join(dir, "deliver.sh")
	require.NoError(t, os.WriteFile(deliver, []byte(exampleDeliverScript), 0o755))
	worker, err := filepath.Abs("../examples/psql/worker.sh")
	require.NoError(t, err)

	runExampleWorkers(t, 2, func(ctx context.Context) *osexec.Cmd {
		cmd := osexec.CommandContext(ctx, worker)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "QUEUE="+queue, "DELIVER_CMD="+deliver,
			"PEER_DIR="+dir, "BATCH=5", "IDLE_SLEEP=0.05", "DRAIN_UNTIL_EMPTY=1")
		return cmd
	})

	f, err := os.Open(filepath.Join(dir, "delivered"))
	require.NoError(t, err)
	defer f.Close()
	var delivered []exampleDelivery
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		idText, key, ok := strings.Cut(sc.Text(), " ")
		require.True(t, ok, "line %q", sc.Text())
		id, err := strconv.ParseInt(idText, 10, 64)
		require.NoError(t, err)
		delivered = append(delivered, exampleDelivery{id: id, key: key})
	}
	require.NoError(t, sc.Err())
	requireExampleDrained(t, db, queue, delivered)
}

// examplePython returns a python3 that can import psycopg2: Debian's python3-psycopg2 belongs to
// /usr/bin/python3, which may not be the first python3 on PATH.
func examplePython(t *testing.T) string {
	t.Helper()
	candidates := []string{"/usr/bin/python3"}
	if p, err := osexec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		if osexec.Command(p, "-c", "import psycopg2").Run() == nil {
			return p
		}
	}
	t.Fatalf("no python3 with psycopg2 among %v: run scripts/ensure-deps.sh (installs python3-psycopg2)", candidates)
	return ""
}

func TestExamples_PythonWorkerDrainsTheQueue(t *testing.T) {
	t.Parallel()
	python := examplePython(t)
	db := testdb.New(t)
	queue := "public.example_python"
	exampleQueue(t, db, queue)

	var mu sync.Mutex
	var delivered []exampleDelivery
	failed := map[int64]bool{}
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.Header.Get("X-Event-Id"), 10, 64)
		if err != nil {
			http.Error(w, "bad X-Event-Id", http.StatusBadRequest)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var payload map[string]any
		if json.Unmarshal(body, &payload) != nil {
			http.Error(w, "body is not JSON", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case payload["malformed"] == true:
			http.Error(w, "malformed payload", http.StatusUnprocessableEntity)
		case payload["flaky"] == true && !failed[id]:
			failed[id] = true
			http.Error(w, "try later", http.StatusServiceUnavailable)
		default:
			delivered = append(delivered, exampleDelivery{id: id, key: r.Header.Get("X-Partition-Key")})
		}
	}))
	defer peer.Close()
	worker, err := filepath.Abs("../examples/python/worker.py")
	require.NoError(t, err)

	runExampleWorkers(t, 2, func(ctx context.Context) *osexec.Cmd {
		cmd := osexec.CommandContext(ctx, python, worker)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "QUEUE="+queue, "WEBHOOK_URL="+peer.URL,
			"BATCH=5", "IDLE_SLEEP=0.05", "DRAIN_UNTIL_EMPTY=1")
		return cmd
	})

	mu.Lock()
	defer mu.Unlock()
	requireExampleDrained(t, db, queue, delivered)
}
