package gocheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/console"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// consoleBundle is a database with what the console shows: a partitioned queue with a wedged key
// (its head backing off), two poisoned rows of one key (with HTML in the error and the payload),
// sent rows old enough to purge, and a firing alert on a three-step ladder. The console's two
// login roles have exactly what docs/security.md ("The console") grants: the reader is a member of
// pgdrain_reader with SELECT (payload) on the queue table (for previews), the operator a member of
// pgdrain_operator with SELECT (id, account_id, attempt_count, sent_at) (for "requeue all of a key").
type consoleBundle struct {
	db          *testdb.DB
	queue       string
	readerURL   string
	operatorURL string
	readerLogin string // the logins behind readerURL and operatorURL
	opLogin     string
	reader      *pgxpool.Pool
	operator    *pgxpool.Pool
	poisoned    []int64 // ids, key acct-3
	alertID     string
}

func newConsoleBundle(t *testing.T) *consoleBundle {
	t.Helper()
	ctx := context.Background()
	db := testdb.New(t)
	b := &consoleBundle{db: db, queue: "public.events"}
	_, err := db.Pool.Exec(ctx, `
		SELECT outbox.create_queue('public.events', 'account_id', max_attempts => 3);
		SELECT outbox.enqueue('public.events', 'signup',
		         jsonb_build_object('n', g, 'html', '<script>alert(1)</script>'), 'acct-' || (g % 4))
		FROM generate_series(1, 20) g;
		UPDATE public.events SET attempt_count = 3, last_error = '<b>peer said 400</b>: bad email' WHERE id IN (3, 7);
		UPDATE public.events SET created_at = now() - interval '10 minutes', attempt_count = 2,
		       next_attempt_at = now() + interval '5 minutes', last_error = 'timeout after 5s' WHERE id = 1;
		UPDATE public.events SET sent_at = now() - interval '8 days' WHERE id IN (4, 8);
		SELECT outbox.repair('public.events');`)
	require.NoError(t, err)
	b.poisoned = []int64{3, 7}
	var policy string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT alr.create_policy('on-call', '[
		{"delay": "0s", "channel": "slack", "target": "#ops"},
		{"delay": "5m", "channel": "sms", "target": "+15550100"},
		{"delay": "15m", "channel": "phone", "target": "+15550101"}]')::text`).Scan(&policy))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT alr.add_alert('api 5xx above 2%')::text`).Scan(&b.alertID))
	_, err = db.Pool.Exec(ctx, `SELECT alr.start_escalation($1::uuid, $2::uuid)`, b.alertID, policy)
	require.NoError(t, err)

	reader := consoleLogin(t, db, "pgdrain_reader")
	_, err = db.Pool.Exec(ctx, fmt.Sprintf("GRANT SELECT (payload) ON public.events TO %s", pgx.Identifier{reader}.Sanitize()))
	require.NoError(t, err)
	b.readerURL, b.readerLogin = consoleURL(db, reader), reader
	operator := consoleLogin(t, db, "pgdrain_operator")
	_, err = db.Pool.Exec(ctx, fmt.Sprintf("GRANT SELECT (id, account_id, attempt_count, sent_at) ON public.events TO %s",
		pgx.Identifier{operator}.Sanitize()))
	require.NoError(t, err)
	b.operatorURL, b.opLogin = consoleURL(db, operator), operator
	b.reader = consolePool(t, b.readerURL)
	b.operator = consolePool(t, b.operatorURL)
	return b
}

// consoleLogin creates a LOGIN role, not a superuser, member of exactly roles; dropped at the end.
func consoleLogin(t *testing.T, db *testdb.DB, roles ...string) string {
	t.Helper()
	buf := make([]byte, 5)
	_, _ = rand.Read(buf)
	login := "pgdrain_t_" + hex.EncodeToString(buf)
	quoted := make([]string, len(roles))
	for i, r := range roles {
		quoted[i] = pgx.Identifier{r}.Sanitize()
	}
	_, err := db.Pool.Exec(context.Background(), fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER IN ROLE %s",
		pgx.Identifier{login}.Sanitize(), strings.Join(quoted, ", ")))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.Pool.Exec(ctx, fmt.Sprintf("DROP OWNED BY %[1]s; DROP ROLE IF EXISTS %[1]s", pgx.Identifier{login}.Sanitize()))
	})
	return login
}

func consoleURL(db *testdb.DB, login string) string {
	u, err := url.Parse(db.URL)
	if err != nil {
		panic(err)
	}
	u.User = url.User(login)
	return u.String()
}

func consolePool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// consoleClient is a browser stand-in: a cookie jar, redirects not followed (so a test sees the
// 303 an action answers with).
type consoleClient struct {
	t    *testing.T
	base string
	http *http.Client
	srv  *console.Server
}

// startConsole serves a console for cfg (Logger set to log) and returns a client for it.
func startConsole(t *testing.T, cfg console.Config, log io.Writer) *consoleClient {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	srv, err := console.New(cfg)
	require.NoError(t, err)
	srv.Sample(context.Background())
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &consoleClient{t: t, base: ts.URL, srv: srv, http: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *consoleClient) do(req *http.Request) (int, string) {
	c.t.Helper()
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp.StatusCode, string(body)
}

func (c *consoleClient) get(path string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	require.NoError(c.t, err)
	return c.do(req)
}

// post sends form as the console's forms do: the CSRF token ("csrf") in the address, the rest
// URL-encoded in the body.
func (c *consoleClient) post(path string, form url.Values) (int, string) {
	c.t.Helper()
	body := url.Values{}
	for k, v := range form {
		if k != "csrf" {
			body[k] = v
		}
	}
	if token := form.Get("csrf"); token != "" {
		path += "?csrf=" + url.QueryEscape(token)
	}
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(body.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

var csrfField = regexp.MustCompile(`action="/actions/[a-z]+\?csrf=([0-9a-f]+)"`)

// csrf reads the token from a page's forms (GET first: it also sets the cookie).
func (c *consoleClient) csrf(page string) string {
	c.t.Helper()
	code, body := c.get(page)
	require.Equal(c.t, http.StatusOK, code, body)
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(c.t, m, "no CSRF token on %s", page)
	return m[1]
}

// addTroubledQueues adds what the overview must flag besides public.events' failing key and
// poisoned rows: public.leases, a partitioned queue whose key k-stuck has a head pending for 20
// minutes that a worker leased for two hours (and a second row behind it), and public.idle, an
// unpartitioned queue whose five rows were written ten minutes ago and that no drainer takes. It
// returns the leased head's id. The console's logins may read both queues as they may public.events.
func addTroubledQueues(t *testing.T, b *consoleBundle) int64 {
	t.Helper()
	ctx := context.Background()
	var head int64
	_, err := b.db.Pool.Exec(ctx, `
		SELECT outbox.create_queue('public.leases', 'account_id');
		SELECT outbox.create_queue('public.idle');
		SELECT outbox.enqueue('public.idle', 'report', jsonb_build_object('n', g)) FROM generate_series(1, 5) g;
		UPDATE public.idle SET created_at = now() - interval '10 minutes';`)
	require.NoError(t, err)
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT outbox.enqueue('public.leases', 'stuck', '{}', 'k-stuck')`).Scan(&head))
	_, err = b.db.Pool.Exec(ctx, `
		SELECT outbox.enqueue('public.leases', 'stuck', '{}', 'k-stuck');
		UPDATE public.leases SET created_at = now() - interval '20 minutes'`)
	require.NoError(t, err)
	worker := loginAs(t, b.db, "pgdrain_worker")
	var claimed int64
	require.NoError(t, worker.QueryRow(ctx, `SELECT id FROM outbox.claim_batch('public.leases', 10, '2 hours')`).Scan(&claimed))
	require.Equal(t, head, claimed)
	_, err = b.db.Pool.Exec(ctx, fmt.Sprintf(`GRANT SELECT (id, account_id, attempt_count, sent_at) ON public.leases TO %s`,
		pgx.Identifier{b.opLogin}.Sanitize()))
	require.NoError(t, err)
	return head
}
