package gocheck

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestConsole_EndToEndInChromium builds pgdrain, starts `pgdrain web` as the roles docs/security.md
// names, and drives it with headless Chromium: every page loads and is screenshot, a requeue goes
// through its confirmation and changes the row in the database, and a --read-only console shows no
// action and refuses a POST. The screenshots go to a temporary directory, or with
// PGDRAIN_UPDATE_SCREENSHOTS=1 to docs/screenshots/ (linked from the README): a plain make test
// leaves the tree as it found it.
// Chromium is a dependency of make test (scripts/ensure-deps.sh): missing, the test fails.
func TestConsole_EndToEndInChromium(t *testing.T) {
	browser := findChromium(t)
	b := newConsoleBundle(t)
	bin := filepath.Join(t.TempDir(), "pgdrain")
	build := osexec.Command("go", "build", "-o", bin, "../cmd/pgdrain")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building pgdrain: %s", out)

	base := startWeb(t, bin, "--dsn", b.readerURL, "--operator-dsn", b.operatorURL, "--refresh", "1s")
	ctx := chromiumContext(t, browser)
	shots := t.TempDir()
	if os.Getenv("PGDRAIN_UPDATE_SCREENSHOTS") == "1" {
		shots = filepath.Join("..", "docs", "screenshots")
		require.NoError(t, os.MkdirAll(shots, 0o755))
	}

	var page string
	for _, p := range []struct{ path, file, want string }{
		{"/", "queues.png", "public.events"},
		{"/queues/public.events", "queue.png", "Poisoned rows"},
		{"/escalations", "escalations.png", "api 5xx above 2%"},
	} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.CSS("main#live"))), p.path)
		page = run(t, ctx, chromedp.OuterHTML(chromedp.CSS("main#live")))
		require.Contains(t, page, p.want, p.path)
		png := run(t, ctx, chromedp.FullScreenshot(100))
		require.NoError(t, os.WriteFile(filepath.Join(shots, p.file), png, 0o644))
	}

	// Requeue poisoned row 7 through the confirmation page.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/queues/public.events"),
		chromedp.Click(chromedp.CSS(`tr[data-id="7"] button`), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	))
	page = run(t, ctx, chromedp.OuterHTML(chromedp.CSS("main#live")))
	require.Contains(t, page, "requeue poisoned row(s) 7")
	png := run(t, ctx, chromedp.FullScreenshot(100))
	require.NoError(t, os.WriteFile(filepath.Join(shots, "confirm.png"), png, 0o644))
	var attempts int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT attempt_count FROM public.events WHERE (payload->>'n')::int = 7`).Scan(&attempts))
	require.Equal(t, 3, attempts, "the confirmation page changes nothing")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#confirm"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	))
	flash := run(t, ctx, chromedp.Text(chromedp.CSS(".flash")))
	require.Contains(t, flash, "requeued 1 poisoned row(s) of public.events")
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT attempt_count FROM public.events WHERE (payload->>'n')::int = 7`).Scan(&attempts))
	require.Zero(t, attempts, "row 7 was requeued")

	// Read-only: the same page without any form, and a POST refused.
	roBase := startWeb(t, bin, "--dsn", b.readerURL, "--read-only")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(roBase+"/queues/public.events"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="3"]`)),
	))
	page = run(t, ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	require.NotContains(t, page, "<form")
	require.Contains(t, page, "read-only")
	resp, err := http.PostForm(roBase+"/actions/requeue", url.Values{"queue": {b.queue}, "all": {"yes"}, "confirm": {"yes"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT attempt_count FROM public.events WHERE (payload->>'n')::int = 3`).Scan(&attempts))
	require.Equal(t, 3, attempts, "the read-only console changed nothing")
}

func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := osexec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium is missing: the console's end-to-end test needs it. Install it " +
		"(Debian: apt-get install chromium; make test runs scripts/ensure-deps.sh, which does)")
	return ""
}

// run runs one chromedp action that returns a value.
func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	require.NoError(t, err)
	return v
}

// chromiumContext starts headless Chromium (no sandbox: the test may run as root) for the test.
func chromiumContext(t *testing.T, browser string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 800), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

var servingLine = regexp.MustCompile(`^pgdrain web: serving (http://\S+)/ `)

// startWeb runs `pgdrain web --listen 127.0.0.1:0 args...` and returns its base URL from the line
// it prints; the process is interrupted when the test ends and must exit 0.
func startWeb(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := osexec.Command(bin, append([]string{"web", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "PGDRAIN_WEB_TOKEN=", "PGDRAIN_WEB_BASIC_AUTH=")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				lines <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			require.NoError(t, err, "pgdrain web exits 0 when interrupted; stderr: %s", stderr.String())
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("pgdrain web did not stop within 30s of an interrupt")
		}
	})
	select {
	case base := <-lines:
		return base
	case err := <-exited:
		t.Fatalf("pgdrain web exited early: %v; stderr: %s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("pgdrain web printed no address within 60s; stderr: %s", stderr.String())
	}
	return ""
}
