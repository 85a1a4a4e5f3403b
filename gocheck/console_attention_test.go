package gocheck

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/console"
)

// The overview points at what is wrong, not only at poisoned rows: a key whose head keeps failing,
// a key whose head a worker leased for two hours, a queue whose ready rows no drainer takes; "ready"
// leaves out the rows blocked behind wedged heads and shows them apart. A healthy queue is not flagged.
func TestConsole_OverviewFlagsWedgedKeysStuckLeasesAndRowsNoDrainerTakes(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	head := addTroubledQueues(t, b)
	_, err := b.db.Pool.Exec(context.Background(), `SELECT outbox.create_queue('public.calm')`)
	require.NoError(t, err)
	c := startConsole(t, console.Config{Reader: b.reader, ReadOnly: true, Refresh: time.Second, WedgedAfter: 2 * time.Second}, &syncBuffer{})
	// "No drainer takes its rows" needs samples over --wedged-after in which nothing was delivered
	// (the insert counter, flushed up to 10s after the inserts, may look like deliveries at first).
	_, page := c.get("/")
	row := func(queue string) string {
		m := regexp.MustCompile(`(?s)<tr data-queue="` + regexp.QuoteMeta(queue) + `"[^>]*>.*?</tr>`).FindString(page)
		require.NotEmpty(t, m, queue)
		return m
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(row("public.idle"), `<li class="stalled">`); {
		require.True(t, time.Now().Before(deadline), "public.idle is not flagged after 30s:\n%s", row("public.idle"))
		time.Sleep(time.Second)
		c.srv.Sample(context.Background())
		_, page = c.get("/")
	}

	require.Contains(t, page, "3 queues need attention: public.events, public.idle, public.leases")
	require.Contains(t, row("public.calm"), `<td data-label="needs attention"><span class="ok">–</span></td>`)
	require.NotContains(t, row("public.calm"), `class="problem"`)

	events := row("public.events")
	require.Contains(t, events, `class="problem"`)
	require.Contains(t, events, "key acct-1: head row 1 has failed 2 time(s)")
	// Wedged after 2s, every key of public.events is: of the 15 rows outbox.stats counts as ready,
	// only the 3 heads that are ready can be claimed; 12 wait behind a head.
	require.Contains(t, events, "key acct-2: head row 2 is ready but no drainer has taken it")
	require.Contains(t, events, `data-label="ready">3</td>`)
	require.Contains(t, events, `data-label="blocked">12</td>`)

	leases := row("public.leases")
	require.Regexp(t, fmt.Sprintf(`<li class="lease">key k-stuck: head row %d, pending for 20m\d*s?, is held by a lease until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(in (2h|1h59m)\); 1 row\(s\) wait behind it. If its worker is gone, release the lease.</li>`, head), leases)
	require.Contains(t, leases, `data-label="ready">0</td>`, "the row behind the leased head is not ready")
	require.Contains(t, leases, `data-label="blocked">1</td>`)

	idle := row("public.idle")
	require.Regexp(t, `<li class="stalled">no drainer takes its rows: 5 ready, none delivered for \d+s \(oldest pending 10m\d*s?\): is a drainer running for this queue\?</li>`, idle)

	// The queue page says the same above its figures, and lists the leased key with its button.
	code, page := c.get("/queues/public.leases")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, `<div class="attention" id="attention"><p>This queue needs attention:</p>`)
	require.Contains(t, page, `<tr data-key="k-stuck" class="problem">`)
	require.Contains(t, page, "<dt>blocked behind wedged keys</dt><dd>1</dd>")
	code, page = c.get("/queues/public.calm")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, `<p class="ok" id="attention">Nothing wedged, stalled or poisoned.</p>`)

	// Rows being delivered are not "rows no drainer takes": a sample after a delivery clears it.
	worker := loginAs(t, b.db, "pgdrain_worker")
	_, err = worker.Exec(context.Background(), `
		SELECT outbox.apply_result('public.idle', c.id, c.lease_token, 'sent') FROM outbox.claim_batch('public.idle', 1) c`)
	require.NoError(t, err)
	c.srv.Sample(context.Background())
	code, page = c.get("/")
	require.Equal(t, http.StatusOK, code, page)
	require.NotContains(t, row("public.idle"), "no drainer takes its rows")
}

// After an action the page says whether it changed anything and what: a release that ended a
// lease shows the figures that moved; one that found the lease gone says nothing changed and does
// not look like one that worked. The same for a requeue of a row that is not poisoned any more, a
// purge that found nothing and an alert resolved twice.
func TestConsole_AfterAnActionThePageSaysWhatChanged(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	head := addTroubledQueues(t, b)
	log := &syncBuffer{}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, log)
	token := c.csrf("/queues/public.leases")
	outcome := func(path string) string {
		code, page := c.get(path)
		require.Equal(t, http.StatusOK, code, page)
		m := regexp.MustCompile(`(?s)<div class="flash [^"]+" role="status" id="outcome">.*?</div>`).FindString(page)
		require.NotEmpty(t, m, "no outcome on %s", path)
		return m
	}

	release := url.Values{"queue": {"public.leases"}, "id": {fmt.Sprint(head)}, "csrf": {token}, "confirm": {"yes"}}
	code, _ := c.post("/actions/release", release)
	require.Equal(t, http.StatusSeeOther, code)
	o := outcome("/queues/public.leases")
	require.Contains(t, o, `<div class="flash changed"`)
	require.Contains(t, o, fmt.Sprintf("<strong>Done:</strong> released the lease of row %d of public.leases: it is claimable now", head))
	require.Contains(t, o, "<li>ready 0 → 1</li>")
	require.Contains(t, o, "<li>leased 1 → 0</li>")
	// The page it redirects to already shows the change (the sampler read the queue again).
	_, page := c.get("/queues/public.leases")
	require.Contains(t, page, "head row "+fmt.Sprint(head)+" is ready but no drainer has taken it")
	require.NotContains(t, page, "Release lease…")

	code, _ = c.post("/actions/release", release)
	require.Equal(t, http.StatusSeeOther, code)
	o = outcome("/queues/public.leases")
	require.Contains(t, o, `<div class="flash unchanged"`)
	require.Contains(t, o, fmt.Sprintf("<strong>Nothing changed:</strong> row %d of public.leases was not leased any more", head))
	require.NotContains(t, o, "<li>")
	require.Contains(t, log.String(), "changed=false")

	code, _ = c.post("/actions/requeue", url.Values{"queue": {b.queue}, "id": {"7"}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	o = outcome("/queues/public.events")
	require.Contains(t, o, "<strong>Done:</strong> requeued 1 poisoned row(s) of public.events (poisoned row(s) 7)")
	require.Contains(t, o, "<li>poisoned 2 → 1</li>")
	require.Contains(t, o, "<li>pending 16 → 17</li>")
	code, _ = c.post("/actions/requeue", url.Values{"queue": {b.queue}, "id": {"7"}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	o = outcome("/queues/public.events")
	require.Contains(t, o, "<strong>Nothing changed:</strong> poisoned row(s) 7 of public.events: not poisoned any more")

	code, _ = c.post("/actions/purge", url.Values{"queue": {"public.idle"}, "older_than": {"7d"}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	o = outcome("/queues/public.idle")
	require.Contains(t, o, "<strong>Nothing changed:</strong> no row of public.idle was sent more than 7d ago: nothing was deleted.")

	resolve := url.Values{"alert": {b.alertID}, "csrf": {token}, "confirm": {"yes"}}
	code, _ = c.post("/actions/resolve", resolve)
	require.Equal(t, http.StatusSeeOther, code)
	o = outcome("/escalations")
	require.Contains(t, o, `<strong>Done:</strong> resolved alert &#34;api 5xx above 2%&#34;`)
	require.Contains(t, o, "<li>state firing → resolved</li>")
	require.Contains(t, o, "<li>running ladders 1 → 0</li>")
	code, _ = c.post("/actions/resolve", resolve)
	require.Equal(t, http.StatusSeeOther, code)
	o = outcome("/escalations")
	require.Contains(t, o, "<strong>Nothing changed:</strong> alert &#34;api 5xx above 2%&#34;")
	require.Contains(t, o, "was already resolved with no running ladder")
}

// The escalations page says whether an engine runs: none connected, the due step is overdue and
// nobody is paged; a session whose application_name starts with escalation.ApplicationName (as
// pgdrain escalate sets it), as a pgdrain_worker login, is a running engine, seen by the reader's
// login without any privilege on pg_stat_activity.
func TestConsole_EscalationsSayWhetherAnEngineRuns(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	c := startConsole(t, console.Config{Reader: b.reader, ReadOnly: true}, &syncBuffer{})
	_, page := c.get("/escalations")
	require.Contains(t, page, `<div class="engine none" id="engine">`)
	require.Contains(t, page, "1 ladder(s) overdue")

	cfg, err := pgxpool.ParseConfig(loginURL(t, b.db, "pgdrain_worker"))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = escalation.ApplicationName + " test-host:4242"
	engine, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	require.NoError(t, engine.Ping(context.Background()))
	_, page = c.get("/escalations")
	require.Contains(t, page, `<div class="engine running" id="engine"><p><strong>An escalation engine is running:</strong> <code>pgdrain-escalate test-host:4242</code> as pgdrain_t_`)
	require.Contains(t, page, "(1 connection(s))")
	require.Contains(t, page, "Last delivery: none journaled yet")
	require.NotContains(t, page, "nobody is being paged", "a step due a moment ago with an engine connected is not overdue yet")

	engine.Close()
	require.Eventually(t, func() bool {
		_, page = c.get("/escalations")
		return regexp.MustCompile(`class="engine none"`).MatchString(page)
	}, 10*time.Second, 100*time.Millisecond, "the engine's sessions are gone")
}
