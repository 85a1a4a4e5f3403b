package gocheck

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/escalation"
	escconfig "github.com/pgdrain/pgdrain/escalation/config"
	"github.com/pgdrain/pgdrain/internal/console"
	"github.com/pgdrain/pgdrain/internal/testdb"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

// escHook is a webhook receiver that verifies every request's Standard Webhooks signature and
// keeps what it received, in order.
type escHook struct {
	mu       sync.Mutex
	got      []escalation.WebhookPayload
	ids      []string
	paths    []string
	rejected int
}

func (h *escHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := webhook.Verify([]string{rlSecret}, r.Header, body, time.Now(), webhook.DefaultTolerance); err != nil {
		h.rejected++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var p escalation.WebhookPayload
	if err := json.Unmarshal(body, &p); err != nil {
		h.rejected++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.got = append(h.got, p)
	h.ids = append(h.ids, r.Header.Get(webhook.HeaderID))
	h.paths = append(h.paths, r.URL.Path)
	w.WriteHeader(http.StatusNoContent)
}

func (h *escHook) received() (payloads []escalation.WebhookPayload, ids, paths []string, rejected int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]escalation.WebhookPayload(nil), h.got...), append([]string(nil), h.ids...), append([]string(nil), h.paths...), h.rejected
}

// --check validates a file without a database; a bad file is a usage error naming each line.
func TestEscalateCLI_CheckNamesEveryBadLine(t *testing.T) {
	t.Parallel()
	path := rlWriteConfig(t, "engine: {lease: 48h}\nchannels:\n  pager:\n    webhook: {url: \"http://x/\"}\n")
	r := runCLI(t, "escalate", "--config", path, "--check")
	require.Equal(t, cli.ExitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, path+":1: engine.lease must be between 1ms and 24h0m0s, got 48h0m0s")
	require.Contains(t, r.stderr, path+":4: channels.pager.webhook.secrets must list at least one signing secret")

	path = rlWriteConfig(t, "channels:\n  pager:\n    webhook: {secrets: ["+rlSecret+"]}\n  sms:\n    webhook: {url: \"https://sms.example/\", secrets: ["+rlSecret+"]}\n")
	r = runCLI(t, "escalate", "--config", path, "--check", "--dsn", "postgres://nobody@127.0.0.1:1/none")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, path+": ok, 2 channel(s): pager, sms\n", r.stdout)

	r = runCLI(t, "escalate")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "escalate: --config FILE is required")
}

// pgdrain escalate, as a pgdrain_worker login, delivers three ladders of three steps to a webhook
// receiver that verifies every signature: the first step of each before a restart of the server
// (pg_ctl restart -m fast), the other two after it, each step exactly once and in order, one
// channel posting to its configured URL and one to each step's target. It serves /healthz and
// /metrics, and the console (as a pgdrain_reader login) shows the engine running while it runs
// and no engine once it stopped. It exits 0 when its context ends (SIGTERM).
// Not parallel: the file takes a secret from the environment (t.Setenv).
func TestEscalateCLI_DeliversAThreeStepLadderThroughAServerRestart(t *testing.T) {
	ctx := context.Background()
	cluster := startOwnCluster(t)
	admin, err := pgx.Connect(ctx, cluster.postgresURL)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `CREATE DATABASE escalatecli`)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	dsn := testdb.WithDatabase(cluster.postgresURL, "escalatecli")
	require.NoError(t, testdb.MigrateUp(ctx, dsn))
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE ROLE esc_cli_worker LOGIN NOSUPERUSER IN ROLE pgdrain_worker;
		CREATE ROLE esc_cli_reader LOGIN NOSUPERUSER IN ROLE pgdrain_reader`)
	require.NoError(t, err)
	as := func(login string) string {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		u.User = url.User(login)
		return u.String()
	}

	hook := &escHook{}
	receiver := httptest.NewServer(hook)
	defer receiver.Close()
	const ladders = 3
	_, err = pool.Exec(ctx, `
		SELECT alr.start_escalation(alr.add_alert('disk full ' || g), p.id)
		FROM (SELECT alr.create_policy('on-call', jsonb_build_array(
		        jsonb_build_object('delay', '0s', 'channel', 'pager', 'target', '#sre'),
		        jsonb_build_object('delay', '4s', 'channel', 'pager', 'target', '+15550100'),
		        jsonb_build_object('delay', '4s', 'channel', 'hook', 'target', $1::text))) AS id) p,
		     generate_series(1, $2) g`, receiver.URL+"/manager", ladders)
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	path := rlWriteConfig(t, fmt.Sprintf(`dsn: %s
listen: %q
log: {level: info, format: text}
engine: {lease: 5s, tick: 100ms, step_timeout: 2s, db_timeout: 2s}
channels:
  pager:
    webhook:
      url: %s/pager
      secrets: [%s]
      headers: {X-Team: sre}
  hook:
    webhook: {secrets: ["${HOOK_SECRET}"]}
`, as("esc_cli_worker"), addr, receiver.URL, rlSecret))
	t.Setenv("HOOK_SECRET", rlSecret)

	c := startConsole(t, console.Config{Reader: consolePool(t, as("esc_cli_reader")), ReadOnly: true}, &syncBuffer{})
	_, page := c.get("/escalations")
	require.Contains(t, page, "No escalation engine is connected")

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() { done <- cli.Run(runCtx, []string{"escalate", "--config", path}, &out, &errOut) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgdrain escalate's log:\n%s", errOut.String())
		}
	})
	delivered := func() int {
		got, _, _, _ := hook.received()
		return len(got)
	}
	require.Eventually(t, func() bool { return delivered() >= ladders }, 30*time.Second, 20*time.Millisecond, "the first steps")
	_, page = c.get("/escalations")
	require.Contains(t, page, `<div class="engine running" id="engine"><p><strong>An escalation engine is running:</strong> <code>pgdrain-escalate `)
	require.Contains(t, page, "as esc_cli_worker")
	code, body := rlGet(t, "http://"+addr+"/healthz")
	require.Equal(t, http.StatusOK, code, body)

	require.NoError(t, cluster.pgCtl("restart", "-m", "fast"))
	require.Less(t, delivered(), ladders*3, "the restart came before the later steps")

	completed := func() int64 {
		var n int64
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM alr.alert_escalations WHERE stop_reason = 'completed'`).Scan(&n)
		return n
	}
	require.Eventually(t, func() bool { return completed() == ladders && delivered() == ladders*3 }, time.Minute, 50*time.Millisecond,
		"every ladder completes after the restart")
	got, ids, paths, rejected := hook.received()
	require.Zero(t, rejected, "every request carried a valid signature")
	perLadder := map[string][]int{}
	seen := map[string]bool{}
	for i, p := range got {
		require.Equal(t, p.IdempotencyKey, ids[i], "webhook-id is the step's idempotency key")
		require.False(t, seen[ids[i]], "step %s delivered once", ids[i])
		seen[ids[i]] = true
		perLadder[p.Step.EscalationID] = append(perLadder[p.Step.EscalationID], p.Step.Index)
		want := map[int]string{0: "/pager", 1: "/pager", 2: "/manager"}[p.Step.Index]
		require.Equal(t, want, paths[i], "step %d of %s", p.Step.Index, p.Alert.Name)
		require.True(t, strings.HasPrefix(p.Alert.Name, "disk full "))
	}
	require.Len(t, perLadder, ladders)
	for esc, steps := range perLadder {
		require.Equal(t, []int{0, 1, 2}, steps, "ladder %s in order", esc)
	}
	var journaled int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM alr.delivery_journal WHERE outcome = 'delivered'`).Scan(&journaled))
	require.Equal(t, ladders*3, journaled)

	require.Eventually(t, func() bool {
		code, _ := rlGet(t, "http://"+addr+"/healthz")
		return code == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "healthy again after the restart")
	code, body = rlGet(t, "http://"+addr+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, fmt.Sprintf(`pgdrain_escalation_steps_total{outcome="delivered"} %d`, ladders*3))
	_, page = c.get("/escalations")
	require.Contains(t, page, "An escalation engine is running", "seen again after the restart")
	require.Contains(t, page, "No running ladder")

	stop()
	select {
	case code := <-done:
		require.Equal(t, cli.ExitOK, code, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("pgdrain escalate did not stop within 30s of its context ending")
	}
	log := errOut.String()
	require.Contains(t, log, "escalation engine started")
	require.Contains(t, log, "(database unavailable)", "the restart is logged with its cause")
	require.Eventually(t, func() bool {
		_, page = c.get("/escalations")
		return strings.Contains(page, "No escalation engine is connected")
	}, 10*time.Second, 100*time.Millisecond, "the console sees the engine gone")
}

// The escalate config in docs/examples/escalate is valid as it stands, and docs/escalate.md quotes
// it verbatim.
func TestDocs_EscalateConfigIsValidAndQuoted(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../docs/escalate.md")
	require.NoError(t, err)
	files, err := filepath.Glob("../docs/examples/escalate/*.yaml")
	require.NoError(t, err)
	require.Len(t, files, 1)
	lookup := func(name string) (string, bool) {
		if strings.HasSuffix(name, "SECRET") {
			return rlSecret, true
		}
		return "value-of-" + name, true
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = escconfig.Parse(f, b, lookup)
		require.NoError(t, err, "%s", f)
		require.Contains(t, string(page), "```yaml\n"+strings.TrimSpace(string(b))+"\n```",
			"docs/escalate.md must quote %s verbatim in a ```yaml block", f)
	}
}
