package gocheck

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestConsole_EndToEndInChromium builds pgdrain, starts `pgdrain web` as the roles docs/security.md
// names, and drives it with headless Chromium: every page loads and is screenshot; the overview
// flags the wedged, leased, stalled and poisoned queues; a requeue goes through its confirmation,
// changes the row in the database, and the page after it says what changed; retry now, skip and
// dismiss go through their confirmations with a reason and the queue page lists them; a release confirmed
// after another operator already released the lease says nothing changed; at 420 px no page is
// wider than the screen; the escalations page says no engine runs and highlights the overdue
// step, the alert is acknowledged (its ladder stops) and resolved, and listed under "Recently
// resolved"; a --read-only console shows no action and refuses a POST. The screenshots go to a
// temporary directory, or with PGDRAIN_UPDATE_SCREENSHOTS=1 to docs/screenshots/ (linked from the
// README and docs/console.md): a plain make test leaves the tree as it found it.
// Chromium is a dependency of make test (scripts/ensure-deps.sh): missing, the test fails.
func TestConsole_EndToEndInChromium(t *testing.T) {
	browser := findChromium(t)
	b := newConsoleBundle(t)
	leasedHead := addTroubledQueues(t, b)
	bin := filepath.Join(t.TempDir(), "pgdrain")
	build := osexec.Command("go", "build", "-o", bin, "../cmd/pgdrain")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building pgdrain: %s", out)

	base := startWeb(t, bin, "--dsn", b.readerURL, "--operator-dsn", b.operatorURL, "--refresh", "1s", "--wedged-after", "3s")
	ctx := chromiumContext(t, browser)
	shots := t.TempDir()
	if os.Getenv("PGDRAIN_UPDATE_SCREENSHOTS") == "1" {
		shots = filepath.Join("..", "docs", "screenshots")
		require.NoError(t, os.MkdirAll(shots, 0o755))
	}
	shoot := func(ctx context.Context, file string) {
		t.Helper()
		png := run(t, ctx, chromedp.FullScreenshot(100))
		require.NoError(t, os.WriteFile(filepath.Join(shots, file), png, 0o644))
	}
	mainHTML := func(ctx context.Context) string {
		t.Helper()
		return run(t, ctx, chromedp.OuterHTML(chromedp.CSS("main#live")))
	}

	// The overview flags what is wrong; public.idle's rows, which no drainer takes, once the
	// samples span --wedged-after (live.js swaps the page's figures in every second).
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("main#live"))))
	require.NoError(t, chromedp.Do(ctx, chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-queue="public.idle"] li.stalled') !== null`,
		chromedp.WithPollingTimeout(30*time.Second))), "public.idle is flagged: no drainer takes its rows")
	page := mainHTML(ctx)
	require.Contains(t, page, "3 queues need attention: public.events, public.idle, public.leases")
	require.Contains(t, page, `<tr data-queue="public.leases" class="problem">`)
	require.Contains(t, page, "key k-stuck: head row "+strconv.FormatInt(leasedHead, 10))
	require.Contains(t, page, "is held by a lease until")
	require.Contains(t, page, "key acct-1: head row 1 has failed 2 time(s)")
	require.Contains(t, page, `<li class="poisoned">2 poisoned row(s)`)
	shoot(ctx, "queues.png")

	for _, p := range []struct{ path, file, want string }{
		{"/queues/public.events", "queue.png", "Poisoned rows"},
		{"/escalations", "escalations.png", "api 5xx above 2%"},
	} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.CSS("main#live"))), p.path)
		page = mainHTML(ctx)
		require.Contains(t, page, p.want, p.path)
		shoot(ctx, p.file)
	}
	require.Contains(t, page, "No escalation engine is connected to this database")
	require.Contains(t, page, `<section class="ladder overdue"`)

	// With pgdrain escalate running (as a pgdrain_worker login), the page says so, the overdue
	// step is delivered and the ladder is not overdue any more.
	hook := &escHook{}
	receiver := httptest.NewServer(hook)
	defer receiver.Close()
	startEscalate(t, bin, rlWriteConfig(t, fmt.Sprintf(`dsn: %s
log: {level: warn}
engine: {tick: 200ms}
channels:
  slack: {webhook: {url: %[2]s, secrets: [%[3]s]}}
  sms: {webhook: {url: %[2]s, secrets: [%[3]s]}}
  phone: {webhook: {url: %[2]s, secrets: [%[3]s]}}
`, consoleURL(b.db, consoleLogin(t, b.db, "pgdrain_worker")), receiver.URL, rlSecret)))
	require.NoError(t, chromedp.Do(ctx, chromedp.Poll[chromedp.Void](
		`document.querySelector('#engine.running') !== null && document.querySelector('section.ladder.overdue') === null`,
		chromedp.WithPollingTimeout(30*time.Second))), "the engine is seen and delivers the overdue step")
	page = mainHTML(ctx)
	require.Contains(t, page, "An escalation engine is running:</strong> <code>pgdrain-escalate ")
	require.Contains(t, page, "slack → #ops · delivered")
	got, _, _, rejected := hook.received()
	require.Len(t, got, 1)
	require.Zero(t, rejected)
	shoot(ctx, "escalations-engine.png")

	// Acknowledge the alert (its ladder stops: nobody is paged further), then resolve it: it is
	// listed as acknowledged, then under "Recently resolved" with who acknowledged it.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/escalations"),
		clickNow(`section.ladder form.acknowledge button`),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.SendKeys(chromedp.CSS("#reason"), "on it"),
		chromedp.Click(chromedp.CSS("#confirm"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(".flash.changed")),
	))
	flash := run(t, ctx, textNow(".flash"))
	require.Contains(t, flash, "Done: acknowledged alert \"api 5xx above 2%\"")
	require.Contains(t, flash, "running ladders 1 → 0")
	page = mainHTML(ctx)
	require.Contains(t, page, `class="acked"`)
	require.Contains(t, page, "on it (via pgdrain web, local)")
	shoot(ctx, "escalations-acknowledged.png")
	require.NoError(t, chromedp.Do(ctx,
		clickNow(`tr.acked form.resolve button`),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS("table#resolved")),
	))
	page = mainHTML(ctx)
	require.Regexp(t, `(?s)<table class="grid stack" id="resolved">.*?api 5xx above 2%.*? by pgdrain_t_[0-9a-f]+ \(on it \(via pgdrain web, local\)\)`, page)
	shoot(ctx, "escalations-resolved.png")

	// Requeue poisoned row 7 through the confirmation page; the page after it says what changed.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/queues/public.events"),
		clickNow(`tr[data-id="7"] form.requeue button`),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	))
	page = mainHTML(ctx)
	require.Contains(t, page, "requeue poisoned row(s) 7")
	shoot(ctx, "confirm.png")
	var attempts int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT attempt_count FROM public.events WHERE (payload->>'n')::int = 7`).Scan(&attempts))
	require.Equal(t, 3, attempts, "the confirmation page changes nothing")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#confirm"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(".flash.changed")),
	))
	flash = run(t, ctx, textNow(".flash"))
	require.Contains(t, flash, "Done: requeued 1 poisoned row(s) of public.events")
	require.Contains(t, flash, "poisoned 2 → 1")
	shoot(ctx, "after-action.png")
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT attempt_count FROM public.events WHERE (payload->>'n')::int = 7`).Scan(&attempts))
	require.Zero(t, attempts, "row 7 was requeued")

	// Retry now, then skip, the wedged head of acct-1 (row 1, backing off) and dismiss poisoned
	// row 3, each through its confirmation with a typed reason; the page after each says what
	// changed, and the queue page lists the actions (outbox.operator_log).
	confirmWithReason := func(button, reason, want string) string {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx,
			chromedp.Navigate(base+"/queues/public.events"),
			clickNow(button),
			chromedp.WaitVisible(chromedp.CSS("#confirm")),
			chromedp.SendKeys(chromedp.CSS("#reason"), reason),
		))
		if button == `tr[data-key="acct-1"] form.skip button` {
			shoot(ctx, "confirm-skip.png")
		}
		require.NoError(t, chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS("#confirm"), chromedp.NodeVisible),
			chromedp.WaitVisible(chromedp.CSS(".flash.changed")),
		))
		flash := run(t, ctx, textNow(".flash"))
		require.Contains(t, flash, want)
		return flash
	}
	confirmWithReason(`tr[data-key="acct-1"] form.retry button`, "peer fixed", "Done: retried row 1 of public.events")
	var backingOff bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT COALESCE(next_attempt_at > now(), false) FROM public.events WHERE id = 1`).Scan(&backingOff))
	require.False(t, backingOff, "row 1's backoff ended")
	// Wedged again (another attempt failed), then skipped.
	_, err = b.db.Pool.Exec(context.Background(), `UPDATE public.events SET next_attempt_at = now() + interval '5 minutes' WHERE id = 1`)
	require.NoError(t, err)
	flash = confirmWithReason(`tr[data-key="acct-1"] form.skip button`, "payload rejected for ever", "Done: skipped row 1 of public.events")
	require.Contains(t, flash, "poisoned 1 → 2")
	shoot(ctx, "after-skip.png")
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT attempt_count FROM public.events WHERE id = 1`).Scan(&attempts))
	require.Equal(t, 3, attempts, "row 1 was skipped (poisoned)")
	confirmWithReason(`tr[data-id="3"] form.dismiss button`, "delivered by hand", "Done: dismissed 1 poisoned row(s) of public.events (3)")
	var dismissed bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT sent_at IS NOT NULL FROM public.events WHERE id = 3`).Scan(&dismissed))
	require.True(t, dismissed, "row 3 was dismissed")
	page = mainHTML(ctx)
	require.Contains(t, page, `<span class="count" data-action="retry">retry 1</span>`)
	require.Contains(t, page, "payload rejected for ever (via pgdrain web, local)")

	// Two operators release the same stuck lease: the first one's page says what changed, the
	// second, confirmed a moment later, says nothing changed and looks different.
	second, cancelSecond := chromedp.NewContext(ctx)
	defer cancelSecond()
	for _, tab := range []context.Context{second, ctx} {
		require.NoError(t, chromedp.Do(tab,
			chromedp.Navigate(base+"/queues/public.leases"),
			clickNow(`tr[data-key="k-stuck"] button`),
			chromedp.WaitVisible(chromedp.CSS("#confirm")),
		))
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(".flash.changed"))))
	flash = run(t, ctx, textNow(".flash"))
	require.Contains(t, flash, "Done: released the lease of row "+strconv.FormatInt(leasedHead, 10))
	require.Contains(t, flash, "leased 1 → 0")
	require.NoError(t, chromedp.Do(second, chromedp.Click(chromedp.CSS("#confirm"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(".flash.unchanged"))))
	flash = run(t, second, textNow(".flash"))
	require.Contains(t, flash, "Nothing changed: row "+strconv.FormatInt(leasedHead, 10)+" of public.leases was not leased any more")
	shoot(second, "nothing-changed.png")

	// A 420 px screen: no page is wider than it (the tables become one card per row).
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(420, 900)))
	for _, path := range []string{"/", "/queues/public.events", "/queues/public.leases", "/escalations"} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main#live"))), path)
		width := run(t, ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		require.LessOrEqual(t, width, 420, "%s is %d px wide on a 420 px screen", path, width)
		if path == "/queues/public.events" {
			shoot(ctx, "narrow.png")
		}
	}

	// Read-only: the same page without any form, and a POST refused.
	roBase := startWeb(t, bin, "--dsn", b.readerURL, "--read-only")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(roBase+"/queues/public.events"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="1"]`)),
	))
	page = run(t, ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	require.NotContains(t, page, "<form")
	require.Contains(t, page, "read-only")
	resp, err := http.PostForm(roBase+"/actions/requeue", url.Values{"queue": {b.queue}, "all": {"yes"}, "confirm": {"yes"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT attempt_count FROM public.events WHERE id = 1`).Scan(&attempts))
	require.Equal(t, 3, attempts, "the read-only console changed nothing")
}

// clickNow waits for the element, then clicks it in the page in one step: live.js replaces the
// page's <main> every --refresh, so a node found by one command may be gone by the next.
func clickNow(selector string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`(function () {
		var el = document.querySelector(%q);
		if (el === null) { return false; }
		el.click();
		return true;
	})()`, selector), chromedp.WithPollingTimeout(30*time.Second))
}

// textNow waits for the element and reads its text in the page in one step, as clickNow clicks: a
// CI run's chromedp.Text found the flash, then failed with "No node with given id found" (-32000)
// when it read it (the node gone between the two calls, the document or <main> replaced).
func textNow(selector string) chromedp.Action[string] {
	return chromedp.Poll[string](fmt.Sprintf(`(function () {
		var el = document.querySelector(%q);
		return el === null ? false : el.textContent;
	})()`, selector), chromedp.WithPollingTimeout(30*time.Second))
}

// startEscalate runs `pgdrain escalate --config path`; the process is interrupted when the test
// ends and must exit 0.
func startEscalate(t *testing.T, bin, path string) {
	t.Helper()
	cmd := osexec.Command(bin, "escalate", "--config", path)
	cmd.Env = append(os.Environ(), "DATABASE_URL=")
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			require.NoError(t, err, "pgdrain escalate exits 0 when interrupted; output: %s", output.String())
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("pgdrain escalate did not stop within 30s of an interrupt")
		}
	})
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
