package gocheck

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/console"
)

// queueFigure reads one figure of a queue's row on the overview ("" when the row has none).
func queueFigure(page, queue, label string) string {
	m := regexp.MustCompile(`(?s)<tr data-queue="` + regexp.QuoteMeta(queue) + `"[^>]*>.*?data-label="` +
		regexp.QuoteMeta(label) + `">([^<]*)<`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return m[1]
}

// One queue whose table is held by an ACCESS EXCLUSIVE lock (a migration, a VACUUM FULL) holds up
// no other queue's figures: they stay live, the held queue's read ends at the pass's deadline, and
// the overview says which figures are not live, since when and why. Once the lock is gone its
// figures are live again and the notice goes.
func TestConsole_AQueueHeldByALockFreezesNoOtherQueueAndTheOverviewSaysSo(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.plain')`)
	require.NoError(t, err)

	srv, err := console.New(console.Config{Reader: b.reader, Operator: b.operator, Refresh: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx, ln) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of its context ending")
		}
	})
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &consoleClient{t: t, base: "http://" + ln.Addr().String(), srv: srv,
		http: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	overview := func() string {
		code, page := c.get("/")
		require.Equal(t, http.StatusOK, code, page)
		return page
	}
	eventually := func(within time.Duration, what string, ok func(page string) bool) string {
		t.Helper()
		var page string
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if page = overview(); ok(page) {
				return page
			}
		}
		t.Fatalf("not within %s: %s; the overview:\n%s", within, what, page)
		return ""
	}
	eventually(10*time.Second, "both queues have figures", func(p string) bool {
		return queueFigure(p, "public.plain", "pending") == "0" && queueFigure(p, "public.events", "pending") != ""
	})
	eventsPending := queueFigure(overview(), "public.events", "pending")

	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `LOCK TABLE public.events IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	heldAt := time.Now()
	_, err = b.db.Pool.Exec(ctx, `SELECT outbox.enqueue('public.plain', 'report', jsonb_build_object('n', g)) FROM generate_series(1, 3) g`)
	require.NoError(t, err)

	// The other queue's figures move on at once (the held one's read waits for the lock meanwhile).
	eventually(5*time.Second, "public.plain's new rows while public.events is held", func(p string) bool {
		return queueFigure(p, "public.plain", "pending") == "3"
	})
	// Within the pass's deadline (10s) and a refresh, the overview says public.events' figures are
	// not live, since when and why; they are still the old ones.
	page := eventually(20*time.Second, "a notice naming public.events", func(p string) bool {
		m := regexp.MustCompile(`(?s)<div class="attention" id="stale">.*?</div>`).FindString(p)
		return strings.Contains(m, "public.events") && strings.Contains(m, "since")
	})
	stale := regexp.MustCompile(`(?s)<div class="attention" id="stale">.*?</div>`).FindString(page)
	require.NotContains(t, stale, "public.plain", "only the held queue is named")
	require.Contains(t, stale, "within 10s", "why: %s", stale)
	require.Equal(t, eventsPending, queueFigure(page, "public.events", "pending"))
	require.Less(t, time.Since(heldAt), 20*time.Second)
	// A read the console gives up on is cancelled on the server too (pgx sends a cancel request):
	// after two deadlines, at most the read in flight waits for the lock, not one more per pass. The
	// cancel reaches the server a moment after the next pass's read may have started (seen in CI: 2
	// at one instant), so the count is sampled for a few seconds: reads that piled up would never
	// drop back to one.
	time.Sleep(time.Until(heldAt.Add(22 * time.Second)))
	waiting := -1
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && (waiting < 0 || waiting > 1); time.Sleep(100 * time.Millisecond) {
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE usename = $1 AND wait_event_type = 'Lock'`, b.readerLogin).Scan(&waiting))
	}
	require.LessOrEqual(t, waiting, 1, "backends of the reader's login queued behind the lock")

	// The lock gone, the held queue is read again and the notice goes.
	require.NoError(t, tx.Rollback(ctx))
	eventually(15*time.Second, "the notice gone once the lock is", func(p string) bool {
		return !strings.Contains(p, `id="stale"`)
	})
}

// A client's mistake is a 400 (404 for an alert that does not exist) with a sentence naming the
// field and the rule, never a 500 with an internal text: an attempt count out of int4's range, an
// unknown alert id, "requeue all of a key" on a queue without keys.
func TestConsole_ClientMistakesAre400WithTheFieldAndTheRule(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	_, err := b.db.Pool.Exec(context.Background(), `SELECT outbox.create_queue('public.plain')`)
	require.NoError(t, err)
	log := &syncBuffer{}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, log)
	token := c.csrf("/queues/public.events")

	t.Run("attempts out of range", func(t *testing.T) {
		c.t = t
		for _, path := range []string{"/actions/skip", "/actions/retry"} {
			for _, confirm := range []string{"", "yes"} {
				code, page := c.post(path, url.Values{"queue": {b.queue}, "id": {"1"}, "attempts": {"2147483648"},
					"reason": {"x"}, "confirm": {confirm}, "csrf": {token}})
				require.Equal(t, http.StatusBadRequest, code, "%s confirm=%q: %s", path, confirm, page)
				require.Contains(t, page, "attempts: must be", path)
				require.Contains(t, page, "2147483647", path)
			}
		}
	})

	t.Run("unknown alert", func(t *testing.T) {
		c.t = t
		unknown := "0b7c3c55-1a6e-4f6e-9d2a-2d7c1f0e4a11"
		for _, path := range []string{"/actions/resolve", "/actions/acknowledge"} {
			for _, confirm := range []string{"", "yes"} {
				code, page := c.post(path, url.Values{"alert": {unknown}, "confirm": {confirm}, "csrf": {token}})
				require.Equal(t, http.StatusNotFound, code, "%s confirm=%q: %s", path, confirm, page)
				require.Contains(t, page, "alert: no alert with id "+unknown, path)
				require.NotContains(t, page, "no rows in result set", path)
			}
		}
	})
	t.Run("key of an unpartitioned queue", func(t *testing.T) {
		c.t = t
		for _, confirm := range []string{"", "yes"} {
			code, page := c.post("/actions/requeue", url.Values{"queue": {"public.plain"}, "key": {"abc"}, "confirm": {confirm}, "csrf": {token}})
			require.Equal(t, http.StatusBadRequest, code, page)
			require.Contains(t, page, "key: public.plain is not partitioned", page)
			require.NotContains(t, page, "has no partition column")
		}
	})
	c.t = t
	require.NotContains(t, log.String(), "console action failed", "a client's mistake is not a failed action")
}

// An id given twice is one row: the confirmation lists it once, and the outcome reports on the
// distinct ids (not "1 of the 2 rows asked for were not poisoned any more").
func TestConsole_AnIDGivenTwiceIsOneRow(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, &syncBuffer{})
	token := c.csrf("/queues/public.events")
	outcome := func() string {
		code, page := c.get("/queues/public.events")
		require.Equal(t, http.StatusOK, code, page)
		m := regexp.MustCompile(`(?s)<div class="flash [^"]+" role="status" id="outcome">.*?</div>`).FindString(page)
		require.NotEmpty(t, m, "no outcome")
		return m
	}

	t.Run("outcomes", func(t *testing.T) {
		c.t = t
		code, _ := c.post("/actions/requeue", url.Values{"queue": {b.queue}, "id": {"7", "7"}, "confirm": {"yes"}, "csrf": {token}})
		require.Equal(t, http.StatusSeeOther, code)
		o := outcome()
		require.Contains(t, o, "<strong>Done:</strong> requeued 1 poisoned row(s) of public.events (poisoned row(s) 7)")
		require.NotContains(t, o, "were not poisoned any more")

		code, _ = c.post("/actions/dismiss", url.Values{"queue": {b.queue}, "id": {"3", "3"}, "confirm": {"yes"},
			"reason": {"never deliverable"}, "csrf": {token}})
		require.Equal(t, http.StatusSeeOther, code)
		o = outcome()
		require.Contains(t, o, "<strong>Done:</strong> dismissed 1 poisoned row(s) of public.events (3)")
		require.NotContains(t, o, "were not poisoned any more")
	})
	t.Run("confirmations", func(t *testing.T) {
		c.t = t
		code, page := c.post("/actions/requeue", url.Values{"queue": {b.queue}, "id": {"7", "7"}, "csrf": {token}})
		require.Equal(t, http.StatusOK, code, page)
		require.Contains(t, page, "requeue poisoned row(s) 7.")
		require.Equal(t, 1, strings.Count(page, `name="id" value="7"`), "the confirmation repeats each id once")
		code, page = c.post("/actions/dismiss", url.Values{"queue": {b.queue}, "id": {"3", "3"}, "csrf": {token}})
		require.Equal(t, http.StatusOK, code, page)
		require.Contains(t, page, "dismiss poisoned row(s) 3 for good")
		require.Equal(t, 1, strings.Count(page, `name="id" value="3"`), "the confirmation repeats each id once")
	})
}

// A queue table dropped outside pgdrain (DROP TABLE, not outbox.drop_queue) leaves its registration:
// once the sampler sees the table gone, the overview and the queue page say so, show none of the
// figures the table had and offer no action on it (each would fail); a form shown before the drop
// is answered 409 with the reason. create_queue registering the table again brings the queue back.
func TestConsole_AQueueWhoseTableWasDroppedShowsAsGoneWithNoActions(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	ctx := context.Background()
	log := &syncBuffer{}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, log)
	token := c.csrf("/queues/public.events")
	_, page := c.get("/")
	require.Equal(t, "16", queueFigure(page, b.queue, "pending"))

	_, err := b.db.Pool.Exec(ctx, `DROP TABLE public.events`)
	require.NoError(t, err)
	c.srv.Sample(ctx)

	code, page := c.get("/")
	require.Equal(t, http.StatusOK, code, page)
	row := regexp.MustCompile(`(?s)<tr data-queue="public.events"[^>]*>.*?</tr>`).FindString(page)
	require.NotEmpty(t, row)
	require.Empty(t, queueFigure(page, b.queue, "pending"), "no figure of a table that is gone: %s", row)
	require.Contains(t, row, "its table no longer exists")
	require.Contains(t, row, "outbox.drop_queue(&#39;public.events&#39;)")
	require.Contains(t, page, "1 queue needs attention: public.events")
	require.NotContains(t, page, `id="stale"`, "not old figures: no figures")

	code, page = c.get("/queues/public.events")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "its table no longer exists")
	require.NotContains(t, page, "/actions/", "no action is offered on a queue whose table is gone")
	require.NotContains(t, page, "<dt>pending</dt>")
	require.NotContains(t, page, "Poisoned rows")

	// A form shown before the drop: 409 with the reason, for every action on a queue.
	for path, form := range map[string]url.Values{
		"/actions/requeue": {"all": {"yes"}},
		"/actions/purge":   {"older_than": {"7d"}},
		"/actions/release": {"id": {"1"}},
		"/actions/skip":    {"id": {"1"}, "attempts": {"2"}, "reason": {"x"}},
		"/actions/retry":   {"id": {"1"}, "attempts": {"2"}},
		"/actions/dismiss": {"id": {"3"}, "reason": {"x"}},
	} {
		for _, confirm := range []string{"", "yes"} {
			f := url.Values{"queue": {b.queue}, "csrf": {token}, "confirm": {confirm}}
			for k, v := range form {
				f[k] = v
			}
			code, page := c.post(path, f)
			require.Equal(t, http.StatusConflict, code, "%s confirm=%q: %s", path, confirm, page)
			require.Contains(t, page, "its table no longer exists", path)
		}
	}
	require.NotContains(t, log.String(), "console action failed")

	_, err = b.db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.events', 'account_id', max_attempts => 3)`)
	require.NoError(t, err)
	c.srv.Sample(ctx)
	_, page = c.get("/")
	require.Equal(t, "0", queueFigure(page, b.queue, "pending"))
	require.NotContains(t, page, "no longer exists")
	_, page = c.get("/queues/public.events")
	require.Contains(t, page, `action="/actions/purge?csrf=`)
}

// postedForm is a form of a page as a browser would send it: its action (with the CSRF token in
// the address) and its hidden fields.
type postedForm struct {
	action string
	fields url.Values
}

// formsOf returns the POST forms of a page whose content matches button.
func formsOf(page string, button *regexp.Regexp) []postedForm {
	var out []postedForm
	inputs := regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	for _, m := range regexp.MustCompile(`(?s)<form method="post" action="([^"]+)"[^>]*>(.*?)</form>`).FindAllStringSubmatch(page, -1) {
		if !button.MatchString(m[2]) {
			continue
		}
		f := postedForm{action: html.UnescapeString(m[1]), fields: url.Values{}}
		for _, in := range inputs.FindAllStringSubmatch(m[2], -1) {
			f.fields.Add(in[1], html.UnescapeString(in[2]))
		}
		out = append(out, f)
	}
	return out
}

// send posts f as the console's forms are posted.
func (c *consoleClient) send(f postedForm) (int, string) {
	c.t.Helper()
	path, query, _ := strings.Cut(f.action, "?")
	q, err := url.ParseQuery(query)
	require.NoError(c.t, err)
	form := url.Values{"csrf": {q.Get("csrf")}}
	for k, v := range f.fields {
		form[k] = v
	}
	return c.post(path, form)
}

// A partition key is indexed with the row's id, so it must fit a btree entry after compression
// (docs/sql-api.md): a key of 70,000 characters that compresses well is a valid key. "Requeue all of
// key K" works for it: the page's form and its confirmation name the key by a row of it, not by the
// key itself (which made the form larger than the 64 KiB an action's body may have: 413).
func TestConsole_RequeueAllOfAKeyOver64KiB(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	ctx := context.Background()
	key := strings.Repeat("tenant-42/", 7000)
	var ids []int64
	rows, err := b.db.Pool.Query(ctx, `SELECT outbox.enqueue('public.events', 'signup', '{}', $1) FROM generate_series(1, 2)`, key)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE public.events SET attempt_count = 3, last_error = 'peer said 400' WHERE id = ANY ($1)`, ids)
	require.NoError(t, err)
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, &syncBuffer{})

	code, page := c.get("/queues/public.events")
	require.Equal(t, http.StatusOK, code, page)
	require.NotContains(t, page, key, "the page shows the key shortened")
	require.Contains(t, page, "tenant-42/… (70000 characters)")
	forms := formsOf(page, regexp.MustCompile(`Requeue all of key tenant-42/tenant-42/`))
	require.Len(t, forms, 1, "one button for the key")
	code, page = c.send(forms[0])
	require.Equal(t, http.StatusOK, code, "the confirmation: %s", page)
	require.Contains(t, page, "requeue the 2 poisoned row(s) of key")
	forms = formsOf(page, regexp.MustCompile(`id="confirm"`))
	require.Len(t, forms, 1)
	code, page = c.send(forms[0])
	require.Equal(t, http.StatusSeeOther, code, page)
	var poisoned int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM public.events WHERE account_id = $1 AND attempt_count >= 3`, key).Scan(&poisoned))
	require.Zero(t, poisoned, "both poisoned rows of the key were requeued")
	_, page = c.get("/queues/public.events")
	require.Contains(t, page, "<strong>Done:</strong> requeued 2 poisoned row(s) of public.events")
}

// The sentences an action answers with show what an operator or a client gave as it is, quoted
// and HTML-escaped, not as Go's %q wrote it (\" for a quote, \u00a0 for a no-break space): an
// alert's name in its confirmations and outcomes, a key in the requeue confirmation, a bad id.
func TestConsole_ActionTextsShowNamesAndKeysAsTheyAre(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	ctx := context.Background()
	name := "checkout \"EU\"\u00a0≥ 2% — café"
	var alertID, policy string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT alr.add_alert($1)::text`, name).Scan(&alertID))
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT id::text FROM alr.escalation_policies LIMIT 1`).Scan(&policy))
	_, err := b.db.Pool.Exec(ctx, `SELECT alr.start_escalation($1::uuid, $2::uuid)`, alertID, policy)
	require.NoError(t, err)
	var row int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT outbox.enqueue('public.events', 'signup', '{}', 'acct "7"')`).Scan(&row))
	_, err = b.db.Pool.Exec(ctx, `UPDATE public.events SET attempt_count = 3 WHERE id = $1`, row)
	require.NoError(t, err)
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, &syncBuffer{})
	token := c.csrf("/queues/public.events")
	const shown = "&#34;checkout &#34;EU&#34;\u00a0≥ 2% — café&#34;"
	plain := func(page string) {
		t.Helper()
		require.NotContains(t, page, `\&#34;`, "no Go escape of a quote")
		require.NotContains(t, page, `\u00a0`, "no Go escape of a no-break space")
	}
	outcome := func() string {
		t.Helper()
		code, page := c.get("/escalations")
		require.Equal(t, http.StatusOK, code, page)
		m := regexp.MustCompile(`(?s)<div class="flash [^"]+" role="status" id="outcome">.*?</div>`).FindString(page)
		require.NotEmpty(t, m, "no outcome")
		return m
	}

	for _, step := range []struct{ path, confirmation, done string }{
		{"/actions/acknowledge", "Acknowledge alert " + shown, "<strong>Done:</strong> acknowledged alert " + shown},
		{"/actions/resolve", "Resolve alert " + shown, "<strong>Done:</strong> resolved alert " + shown},
	} {
		code, page := c.post(step.path, url.Values{"alert": {alertID}, "csrf": {token}})
		require.Equal(t, http.StatusOK, code, page)
		plain(page)
		require.Contains(t, page, step.confirmation)
		code, page = c.post(step.path, url.Values{"alert": {alertID}, "csrf": {token}, "confirm": {"yes"}})
		require.Equal(t, http.StatusSeeOther, code, page)
		o := outcome()
		plain(o)
		require.Contains(t, o, step.done)
	}
	code, page := c.post("/actions/resolve", url.Values{"alert": {alertID}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code, page)
	o := outcome()
	plain(o)
	require.Contains(t, o, "<strong>Nothing changed:</strong> alert "+shown)

	code, page = c.post("/actions/requeue", url.Values{"queue": {b.queue}, "key": {`acct "7"`}, "csrf": {token}})
	require.Equal(t, http.StatusOK, code, page)
	plain(page)
	require.Contains(t, page, "requeue the 1 poisoned row(s) of key &#34;acct &#34;7&#34;&#34;.")
	code, page = c.post("/actions/requeue", url.Values{"queue": {b.queue}, "id": {`x"1`}, "csrf": {token}})
	require.Equal(t, http.StatusBadRequest, code, page)
	plain(page)
	require.Contains(t, page, "id: must be a positive integer, got &#34;x&#34;1&#34;")
}
