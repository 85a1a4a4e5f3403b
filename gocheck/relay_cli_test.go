package gocheck

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/relay/config"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

const rlSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func rlWriteConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// --check validates a file without a database; a bad file is a usage error naming each line.
func TestRelayCLI_CheckNamesEveryBadLine(t *testing.T) {
	t.Parallel()
	path := rlWriteConfig(t, "queues:\n  - queue: public.events\n    concurrency: 0\n    claim_mode: fast\n    sink:\n      webhook: {url: http://x/}\n")
	r := runCLI(t, "relay", "--config", path, "--check")
	require.Equal(t, cli.ExitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, path+":4: queues[0].claim_mode must be lease or lock, got \"fast\"")
	require.Contains(t, r.stderr, path+":6: queues[0].sink.webhook.secrets must list at least one signing secret")

	path = rlWriteConfig(t, "queues:\n  - queue: public.events\n    sink:\n      webhook: {url: http://x/, secrets: ["+rlSecret+"]}\n")
	r = runCLI(t, "relay", "--config", path, "--check", "--dsn", "postgres://nobody@127.0.0.1:1/none")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, path+": ok, 1 queue(s)\n", r.stdout)

	r = runCLI(t, "relay")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "relay: --config FILE is required")
}

// pgdrain relay, as pgdrain_worker, delivers a queue to a webhook that verifies every signature,
// serves /healthz and /metrics while it runs, and exits 0 when its context ends (SIGTERM).
func TestRelayCLI_RelaysToAVerifyingWebhookUntilStopped(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	for seq := range 5 {
		for _, key := range []string{"a", "b"} {
			q.enqueue(t, key, "op", seq)
		}
	}
	var mu sync.Mutex
	var got []string
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]string{rlSecret}, r.Header, body, time.Now(), webhook.DefaultTolerance); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		got = append(got, r.Header.Get("webhook-id"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer peer.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	path := rlWriteConfig(t, fmt.Sprintf(`dsn: %s
listen: %q
log: {level: warn}
queues:
  - queue: public.events
    concurrency: 4
    timeout: 1s
    poll_fallback: 1m
    sink:
      webhook:
        url: %s
        secrets: [%s]
`, loginURL(t, q.db, "pgdrain_worker"), addr, peer.URL, rlSecret))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut strings.Builder
	done := make(chan int, 1)
	go func() { done <- cli.Run(ctx, []string{"relay", "--config", path}, &out, &errOut) }()

	drWaitFor(t, 30*time.Second, "every event sent", func() bool { return q.sent(t) == 10 })
	code, body := rlGet(t, "http://"+addr+"/healthz")
	require.Equal(t, http.StatusOK, code, body)
	code, body = rlGet(t, "http://"+addr+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `pgdrain_relay_deliveries_total{outcome="sent",queue="public.events",sink="webhook"} 10`)
	cancel()
	select {
	case c := <-done:
		require.Equal(t, cli.ExitOK, c, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("pgdrain relay did not stop within 30s of its context ending")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 10)
}

// Every relay config in docs/examples/relay is valid as it stands, and README.md or a page of docs/
// quotes each verbatim.
func TestDocs_RelayConfigsAreValidAndQuoted(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../docs/examples/relay/*.yaml")
	require.NoError(t, err)
	require.Len(t, files, 3)
	lookup := func(name string) (string, bool) {
		if strings.HasPrefix(name, "WEBHOOK_SECRET") {
			return rlSecret, true
		}
		return "value-of-" + name, true
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = config.Parse(f, b, lookup)
		require.NoError(t, err, "%s", f)
		requireQuoted(t, "yaml", strings.TrimSpace(string(b)), strings.TrimPrefix(f, "../"))
	}
}
