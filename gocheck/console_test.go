package gocheck

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/console"
)

func TestConsole_PagesShowTheQueuesTheirProblemsAndTheLadders(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	c := startConsole(t, console.Config{Reader: b.reader, ReadOnly: true}, &syncBuffer{})

	code, page := c.get("/")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, `href="/queues/public.events"`)
	// 20 enqueued, 2 sent, 2 poisoned: 16 pending, one of them backing off; of the 15 that
	// outbox.stats counts as ready, 4 wait behind the head of the wedged key acct-1.
	require.Regexp(t, `data-label="pending">16</td><td class="n" data-label="ready">11</td>\s*<td class="n bad" data-label="blocked">4</td>`+
		`<td class="n" data-label="leased">0</td>\s*<td class="n" data-label="backing off">1</td><td class="n bad" data-label="poisoned">2</td>`, page)
	require.Contains(t, page, "1 queue needs attention: public.events")
	require.Regexp(t, `<li class="failing">key acct-1: head row 1 has failed 2 time\(s\) and is pending for 10m\d*s?; next try in (5m|4m5\ds); 4 row\(s\) wait behind it.</li>`, page)
	require.Contains(t, page, `<li class="poisoned">2 poisoned row(s)`)

	code, page = c.get("/queues/public.events")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, `<td data-label="key">acct-1</td>`, "the key whose head backs off is wedged")
	require.Contains(t, page, "backing off until")
	require.Contains(t, page, "timeout after 5s")
	for _, id := range b.poisoned {
		require.Contains(t, page, fmt.Sprintf(`<tr data-id="%d">`, id))
	}
	// Error texts and payloads are data: escaped, never markup.
	require.Contains(t, page, "&lt;b&gt;peer said 400&lt;/b&gt;")
	require.Contains(t, page, "&lt;script&gt;alert(1)&lt;/script&gt;")
	require.NotContains(t, page, "<script>alert(1)")
	require.NotContains(t, page, "<form", "a read-only console shows no action")

	code, page = c.get("/escalations")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "api 5xx above 2%")
	require.Contains(t, page, "Next: step 1 of 3")
	require.Contains(t, page, "slack → #ops · next")
	require.Contains(t, page, "No escalation engine is connected to this database")
	require.Contains(t, page, `<section class="ladder overdue"`, "a due step with no engine to deliver it is overdue")
	require.Contains(t, page, "no escalation engine is running, nobody is being paged")

	// live.js asks for the fragment: <main>'s content only.
	req, err := http.NewRequest(http.MethodGet, c.base+"/queues/public.events", nil)
	require.NoError(t, err)
	req.Header.Set("X-Pgdrain-Fragment", "1")
	code, frag := c.do(req)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, frag, "<html")
	require.Contains(t, frag, `<tr data-id="3">`)

	code, page = c.get("/queues/public.nope")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, page, "No queue named public.nope is registered")
}

func TestConsole_RequeueNeedsTheCSRFTokenAndAConfirmationAndIsLogged(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	log := &syncBuffer{}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, log)
	attempts := func(id int64) int {
		var n int
		// requeue moves a row of a partitioned queue to a new id: find it by its payload.
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			`SELECT attempt_count FROM public.events WHERE (payload->>'n')::int = $1`, id).Scan(&n))
		return n
	}

	form := url.Values{"queue": {b.queue}, "id": {"3"}, "confirm": {"yes"}}
	code, _ := c.post("/actions/requeue", form)
	require.Equal(t, http.StatusForbidden, code, "no CSRF cookie or token")
	token := c.csrf("/queues/public.events")
	wrong := []byte(token)
	if wrong[0] == '0' { // a token differing from the right one in its first character
		wrong[0] = '1'
	} else {
		wrong[0] = '0'
	}
	form.Set("csrf", string(wrong))
	code, _ = c.post("/actions/requeue", form)
	require.Equal(t, http.StatusForbidden, code, "a wrong token")
	require.Equal(t, 3, attempts(3))

	form = url.Values{"queue": {b.queue}, "id": {"3"}, "csrf": {token}}
	code, page := c.post("/actions/requeue", form)
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "Please confirm")
	require.Contains(t, page, "requeue poisoned row(s) 3")
	require.Contains(t, page, `name="confirm" value="yes"`)
	require.Equal(t, 3, attempts(3), "asking is not doing")

	form.Set("confirm", "yes")
	code, _ = c.post("/actions/requeue", form)
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, 0, attempts(3))
	require.Equal(t, 3, attempts(7), "only the row asked for")
	code, page = c.get("/queues/public.events")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "requeued 1 poisoned row(s) of public.events")
	require.Contains(t, log.String(), `msg="console action" who=local`)
	require.Contains(t, log.String(), "action=/actions/requeue queue=public.events ids=[3]")
	require.Contains(t, log.String(), "requeued=1")
	require.Contains(t, log.String(), "missing or wrong CSRF token")

	// All of a key: acct-3's other poisoned row.
	code, _ = c.post("/actions/requeue", url.Values{"queue": {b.queue}, "key": {"acct-3"}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, 0, attempts(7))
	require.Contains(t, log.String(), "key=acct-3")

	code, page = c.post("/actions/requeue", url.Values{"queue": {b.queue}, "id": {"x1"}, "csrf": {token}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, page, "id: must be a positive integer, got &#34;x1&#34;")
	code, page = c.post("/actions/requeue", url.Values{"queue": {"public.nope"}, "all": {"yes"}, "csrf": {token}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, page, "no queue named &#34;public.nope&#34; is registered")
}

func TestConsole_PurgeAndResolveGoThroughTheSQLFunctions(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	log := &syncBuffer{}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, log)
	ctx := context.Background()
	token := c.csrf("/queues/public.events")

	code, page := c.post("/actions/purge", url.Values{"queue": {b.queue}, "older_than": {"7d"}, "csrf": {token}})
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "delete rows sent more than 7d ago")
	code, _ = c.post("/actions/purge", url.Values{"queue": {b.queue}, "older_than": {"7d"}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	var sent int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM public.events WHERE sent_at IS NOT NULL`).Scan(&sent))
	require.Zero(t, sent)
	require.Contains(t, log.String(), "deleted=2")
	code, page = c.post("/actions/purge", url.Values{"queue": {b.queue}, "older_than": {"soon"}, "csrf": {token}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, page, "older_than: want a duration like 90s, 5m, 12h or 7d")

	code, page = c.post("/actions/resolve", url.Values{"alert": {b.alertID}, "csrf": {token}})
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "Resolve alert &#34;api 5xx above 2%&#34;")
	code, _ = c.post("/actions/resolve", url.Values{"alert": {b.alertID}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	var state string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state FROM alr.alerts WHERE id = $1::uuid`, b.alertID).Scan(&state))
	require.Equal(t, "resolved", state)
	code, page = c.get("/escalations")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "No running ladder")
	code, page = c.post("/actions/resolve", url.Values{"alert": {"'; DROP TABLE alr.alerts; --"}, "csrf": {token}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, page, "alert: must be an alert id (uuid)")
}

// Releasing a stuck lease goes through outbox.release_lease after a confirmation: the row is free
// at once; a second release says nothing was leased.
func TestConsole_ReleaseLeaseEndsAStuckLease(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	log := &syncBuffer{}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, log)
	ctx := context.Background()
	var id int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT outbox.enqueue($1, 'stuck', '{}', 'acct-stuck')`, b.queue).Scan(&id))
	worker := loginAs(t, b.db, "pgdrain_worker")
	var claimed int64
	require.NoError(t, worker.QueryRow(ctx, `SELECT id FROM outbox.claim_batch($1, 100, '1 hour') WHERE id = $2`, b.queue, id).Scan(&claimed))
	token := c.csrf("/queues/public.events")

	form := url.Values{"queue": {b.queue}, "id": {fmt.Sprint(id)}, "csrf": {token}}
	code, page := c.post("/actions/release", form)
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, fmt.Sprintf("end the lease of row %d now", id))
	form.Set("confirm", "yes")
	code, _ = c.post("/actions/release", form)
	require.Equal(t, http.StatusSeeOther, code)
	var leased bool
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT lease_token IS NOT NULL FROM public.events WHERE id = $1`, id).Scan(&leased))
	require.False(t, leased, "the lease is gone")
	require.Contains(t, log.String(), "released=true")
	code, _ = c.post("/actions/release", form)
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, log.String(), "released=false")
	code, page = c.post("/actions/release", url.Values{"queue": {b.queue}, "id": {"1; DROP TABLE x"}, "csrf": {token}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, page, "id: must be a row id")
}

func TestConsole_ReadOnlyRefusesEveryAction(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	log := &syncBuffer{}
	// An operator pool is given, and still: --read-only wins.
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator, ReadOnly: true}, log)
	code, page := c.get("/queues/public.events")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, "/actions/")
	require.Contains(t, page, "read-only")
	for _, path := range []string{"/actions/requeue", "/actions/purge", "/actions/resolve"} {
		code, page := c.post(path, url.Values{"queue": {b.queue}, "all": {"yes"}, "older_than": {"0s"}, "alert": {b.alertID}, "confirm": {"yes"}})
		require.Equal(t, http.StatusForbidden, code, path)
		require.Contains(t, page, "read-only")
	}
	var poisoned, sent int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE attempt_count >= 3), count(*) FILTER (WHERE sent_at IS NOT NULL) FROM public.events`).Scan(&poisoned, &sent))
	require.Equal(t, []int{2, 2}, []int{poisoned, sent})
	require.Contains(t, log.String(), "console action refused: read-only")
}

// The pages read through a pgdrain_reader login with no privilege on the queue table: the poisoned
// rows are listed (outbox.poisoned_rows) without payload previews; a grant of the payload column
// to that login shows them, escaped.
func TestConsole_PoisonedRowsAsReaderAndPayloadsOnlyWithTheirGrant(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	ctx := context.Background()

	login := consoleLogin(t, b.db, "pgdrain_reader")
	c := startConsole(t, console.Config{Reader: consolePool(t, consoleURL(b.db, login))}, &syncBuffer{})
	code, page := c.get("/queues/public.events")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, `<tr data-id="7">`)
	require.Contains(t, page, "Payloads hidden")
	require.NotContains(t, page, "alert(1)")
	require.NotContains(t, page, "SQLSTATE")

	_, err := b.db.Pool.Exec(ctx, fmt.Sprintf("GRANT SELECT (payload) ON public.events TO %s", pgx.Identifier{login}.Sanitize()))
	require.NoError(t, err)
	code, page = c.get("/queues/public.events")
	require.Equal(t, http.StatusOK, code, page)
	require.NotContains(t, page, "Payloads hidden")
	require.Contains(t, page, "&lt;script&gt;alert(1)&lt;/script&gt;", "the preview is shown, escaped")
	require.NotContains(t, page, "<script>alert(1)")
}

func TestConsole_AuthenticationAndTheListenAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		auth bool
		ok   bool
	}{
		{"127.0.0.1:8080", false, true}, {"[::1]:0", false, true}, {"localhost:8080", false, true},
		{":8080", false, false}, {"0.0.0.0:8080", false, false}, {"10.1.2.3:8080", false, false},
		{"console.internal:8080", false, false}, {"0.0.0.0:8080", true, true}, {"8080", false, false},
	} {
		err := console.CheckListen(tc.addr, tc.auth)
		require.Equal(t, tc.ok, err == nil, "%s auth=%v: %v", tc.addr, tc.auth, err)
	}
	require.ErrorContains(t, console.CheckListen("0.0.0.0:8080", false), "give --token or --basic-auth")

	b := newConsoleBundle(t)
	c := startConsole(t, console.Config{Reader: b.reader, Token: "s3cret", ReadOnly: true}, &syncBuffer{})
	code, _ := c.get("/")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = c.get("/?token=wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = c.get("/escalations?token=s3cret")
	require.Equal(t, http.StatusSeeOther, code, "the token becomes a cookie and leaves the address")
	code, page := c.get("/escalations")
	require.Equal(t, http.StatusOK, code, page)
	req, err := http.NewRequest(http.MethodGet, c.base+"/", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer s3cret")
	code, _ = (&consoleClient{t: t, base: c.base, http: &http.Client{}}).do(req)
	require.Equal(t, http.StatusOK, code)

	c = startConsole(t, console.Config{Reader: b.reader, BasicUser: "ops", BasicPassword: "pw", Operator: b.operator}, &syncBuffer{})
	code, _ = c.get("/")
	require.Equal(t, http.StatusUnauthorized, code)
	u, err := url.Parse(c.base)
	require.NoError(t, err)
	u.User = url.UserPassword("ops", "pw")
	c.base = u.String()
	code, page = c.get("/")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "operator · ops")

	// Without authentication the console answers only to a loopback Host (DNS rebinding).
	c = startConsole(t, console.Config{Reader: b.reader, ReadOnly: true}, &syncBuffer{})
	req, err = http.NewRequest(http.MethodGet, c.base+"/", nil)
	require.NoError(t, err)
	req.Host = "attacker.example:80"
	code, page = c.do(req)
	require.Equal(t, http.StatusMisdirectedRequest, code)
	require.True(t, strings.Contains(page, "loopback only"), page)
}

// "Release lease…" ends only the lease its page showed: after that lease ran out and a healthy
// worker took the row, the click changes nothing (before, it ended the healthy worker's lease and
// the row was delivered twice at once). The page's button carries the lease end; the lease it
// names is ended as before.
func TestConsole_ReleaseLeaseEndsOnlyTheLeaseThePageShowed(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	log := &syncBuffer{}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, log)
	ctx := context.Background()
	var id int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT outbox.enqueue($1, 'stuck', '{}', 'acct-stuck')`, b.queue).Scan(&id))
	exec(t, b.db.Pool, `UPDATE public.events SET created_at = now() - interval '10 minutes' WHERE id = $1`, id)
	worker := loginAs(t, b.db, "pgdrain_worker")
	claim := func() (token string) {
		require.NoError(t, worker.QueryRow(ctx, `SELECT lease_token::text FROM outbox.claim_batch($1, 100, '1 hour') WHERE id = $2`,
			b.queue, id).Scan(&token))
		return token
	}
	shownLease := func() string {
		c.srv.Sample(ctx)
		code, page := c.get("/queues/public.events")
		require.Equal(t, http.StatusOK, code)
		m := regexp.MustCompile(`name="leased_until" value="([^"]+)"`).FindStringSubmatch(page)
		require.NotNil(t, m, "the release button carries the lease it ends:\n%s", page)
		return m[1]
	}
	claim()
	seen := shownLease()
	var until time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT leased_until FROM public.events WHERE id = $1`, id).Scan(&until))
	shown, err := time.Parse(time.RFC3339Nano, seen)
	require.NoError(t, err)
	require.True(t, until.Equal(shown), "the page shows the row's lease end: %s, %s", until, seen)

	// That lease runs out; a healthy worker takes the row.
	exec(t, b.db.Pool, `UPDATE public.events SET leased_until = clock_timestamp() - interval '1 second' WHERE id = $1`, id)
	healthy := claim()
	token := c.csrf("/queues/public.events")
	form := url.Values{"queue": {b.queue}, "id": {fmt.Sprint(id)}, "leased_until": {seen}, "csrf": {token}}
	code, page := c.post("/actions/release", form)
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "If that lease has ended and another worker took the row meanwhile, nothing changes.")
	form.Set("confirm", "yes")
	code, _ = c.post("/actions/release", form)
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, log.String(), "released=false")
	var held string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT coalesce(lease_token::text, '') FROM public.events WHERE id = $1`, id).Scan(&held))
	require.Equal(t, healthy, held, "the healthy worker's lease stands")

	// The lease the page shows now is ended.
	form.Set("leased_until", shownLease())
	code, _ = c.post("/actions/release", form)
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, log.String(), "released=true")
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT coalesce(lease_token::text, '') FROM public.events WHERE id = $1`, id).Scan(&held))
	require.Empty(t, held, "that lease is gone")
}

// Bytes that are no text in the database's encoding (a NUL, an overlong UTF-8 form) in a reason or
// a key are the client's mistake: 400 with the database's word, nothing changed (it was 500).
func TestConsole_BadBytesInAFormAreTheClientsMistake(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, &syncBuffer{})
	token := c.csrf("/queues/public.events")
	for _, form := range []url.Values{
		{"queue": {b.queue}, "id": {"1"}, "attempts": {"2"}, "reason": {"a\x00b"}, "confirm": {"yes"}, "csrf": {token}},
		{"queue": {b.queue}, "key": {"\xc0\x80"}, "confirm": {"yes"}, "csrf": {token}},
	} {
		path := "/actions/skip"
		if form.Has("key") {
			path = "/actions/requeue"
		}
		code, page := c.post(path, form)
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", path, page)
		require.Contains(t, page, "invalid byte sequence")
	}
}

// "Requeue all of key K" requeues the rows its confirmation counted: a row of the key poisoned
// between the confirmation and the click stays poisoned, and the outcome says so (before, the click
// requeued it too, more rows than the confirmation named).
func TestConsole_RequeueOfAKeyRequeuesTheRowsItsConfirmationNamed(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, &syncBuffer{})
	ctx := context.Background()
	token := c.csrf("/queues/public.events")
	code, page := c.post("/actions/requeue", url.Values{"queue": {b.queue}, "key": {"acct-3"}, "csrf": {token}})
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, `requeue the 2 poisoned row(s) of key &#34;acct-3&#34;`)
	require.Contains(t, page, `name="ids" value="3,7"`)

	var late int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `INSERT INTO public.events (event_type, payload, account_id, attempt_count, last_error)
		VALUES ('late', '{}', 'acct-3', 3, 'poisoned after the confirmation') RETURNING id`).Scan(&late))
	code, _ = c.post("/actions/requeue", url.Values{"queue": {b.queue}, "key": {"acct-3"}, "ids": {"3,7"}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	var poisoned []int64
	rows, err := b.db.Pool.Query(ctx, `SELECT id FROM public.events WHERE account_id = 'acct-3' AND sent_at IS NULL AND attempt_count >= 3 ORDER BY id`)
	require.NoError(t, err)
	poisoned, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{late}, poisoned, "the two rows named were requeued, the late one was not")
	_, page = c.get("/queues/public.events")
	require.Contains(t, page, "1 row(s) of the key poisoned since the confirmation stay poisoned")
}

// The pages' reads leave the sampler its half of the reader pool: six open tabs of a queue page
// whose table is locked ACCESS EXCLUSIVE hold at most the other half (before, they took every
// connection, and the sampler's reads of every other queue timed out behind them, blamed on "a
// lock held on the table"). The tabs beyond it wait, then answer 503 or their page.
func TestConsole_PageReadsLeaveTheSamplerItsConnections(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 4
	reader, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer reader.Close()
	c := startConsole(t, console.Config{Reader: reader, ReadOnly: true}, &syncBuffer{})

	locker, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(ctx) }()
	_, err = locker.Exec(ctx, `LOCK TABLE public.events IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.get("/queues/public.events")
		}()
	}
	time.Sleep(time.Second)
	held := reader.Stat().AcquiredConns()
	require.NoError(t, locker.Rollback(ctx))
	wg.Wait()
	require.LessOrEqual(t, held, int32(2), "six tabs hold at most half of the 4 connections")
	require.Positive(t, held, "the tabs were reading")
}

// Against an outbox schema before 00046 (release_lease without its fence), "Release lease…" still
// ends the lease, unfenced as before, and says that the schema can not end only the lease shown.
func TestConsole_ReleaseLeaseOnASchemaWithoutTheFence(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	log := &syncBuffer{}
	ctx := context.Background()
	exec(t, b.db.Pool, `DROP FUNCTION outbox.release_lease(text, bigint, timestamptz)`)
	exec(t, b.db.Pool, `CREATE FUNCTION outbox.release_lease(queue text, id bigint) RETURNS boolean
		LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
		AS $$ SELECT outbox._release_row(outbox._queue('release_lease', queue), id, NULL) $$`)
	exec(t, b.db.Pool, `GRANT EXECUTE ON FUNCTION outbox.release_lease(text, bigint) TO pgdrain_operator`)
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, log)
	var id int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT outbox.enqueue($1, 'stuck', '{}', 'acct-stuck')`, b.queue).Scan(&id))
	worker := loginAs(t, b.db, "pgdrain_worker")
	var until time.Time
	require.NoError(t, worker.QueryRow(ctx, `SELECT leased_until FROM outbox.claim_batch($1, 100, '1 hour') WHERE id = $2`,
		b.queue, id).Scan(&until))
	token := c.csrf("/queues/public.events")
	code, _ := c.post("/actions/release", url.Values{"queue": {b.queue}, "id": {fmt.Sprint(id)},
		"leased_until": {until.Format(time.RFC3339Nano)}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, log.String(), "released=true")
	_, page := c.get("/queues/public.events")
	require.Contains(t, page, "older than migration 00046")
}

// A reader login that may not read the registry is not told that no queue is registered: the
// overview says the registry's read failed, and why (it said "outbox.queues is empty" under the
// permission error).
func TestConsole_AReaderWithoutTheRegistryIsNotToldItIsEmpty(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	login := consoleLogin(t, b.db, "pgdrain_producer")
	c := startConsole(t, console.Config{Reader: consolePool(t, consoleURL(b.db, login)), ReadOnly: true}, &syncBuffer{})
	code, page := c.get("/")
	require.Equal(t, http.StatusOK, code, page)
	require.NotContains(t, page, "outbox.queues is empty")
	require.Contains(t, page, "No queue could be read")
	require.Contains(t, page, "permission denied")
}
