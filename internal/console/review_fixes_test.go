package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/console/timetext"
)

// tossedCSRF is a cookie of s's CSRF cookie name that another origin of this host set (cookies do
// not isolate ports): 32 characters, like a cookie the console once minted, but not this one.
func tossedCSRF(s *Server) *http.Cookie {
	return &http.Cookie{Name: s.cookies.csrf, Value: strings.Repeat("a", 32)}
}

// A page on another port of this host can set a CSRF cookie of the console's name with a longer
// path (Path=/actions, or the path of a page); the browser then sends it before the console's own.
// The console's own cookie still counts, and an unknown cookie alone still does not.
func TestCSRF_ACookieTossedByAnotherPortBlocksNoAction(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{})
	resp := serve(s, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil))
	own := cookieNamed(resp, s.cookies.csrf)
	require.NotNil(t, own)
	token := s.mac("csrf", own.Value)

	post := func(cookies ...*http.Cookie) int {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/actions/requeue?csrf="+token,
			strings.NewReader("queue=public.none&all=yes"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for _, c := range cookies {
			req.AddCookie(c)
		}
		return serve(s, req).StatusCode
	}
	// Past the CSRF check, the action answers that no such queue is registered (400).
	require.Equal(t, http.StatusBadRequest, post(own), "the console's own cookie")
	require.Equal(t, http.StatusBadRequest, post(tossedCSRF(s), own), "a tossed cookie sent first")
	require.Equal(t, http.StatusBadRequest, post(own, tossedCSRF(s)), "a tossed cookie sent after")
	require.Equal(t, http.StatusForbidden, post(tossedCSRF(s)), "only a tossed cookie")
	require.Equal(t, http.StatusForbidden, post(), "no cookie")

	// A cookie tossed with the path of a page (Path=/queues) comes first on that page: its forms
	// still carry the token of the console's own cookie, the only one sent with the action.
	var formToken string
	h := s.csrf(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { formToken = csrfToken(r) }))
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/queues/public.events", nil)
	req.AddCookie(tossedCSRF(s))
	req.AddCookie(own)
	h.ServeHTTP(httptest.NewRecorder(), req)
	require.Equal(t, token, formToken, "the forms of a page carry the token of the console's own cookie")
	require.Equal(t, http.StatusBadRequest, post(own))
}

// /static/ serves the console's files, never a listing of its directories.
func TestStatic_FilesOnlyNoDirectoryListing(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{ReadOnly: true})
	for _, p := range []string{"/static/", "/static/./", "/static//"} {
		resp := serve(s, httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+p, nil))
		body, _ := io.ReadAll(resp.Body)
		require.NotEqual(t, http.StatusOK, resp.StatusCode, "%s: %s", p, body)
		require.NotContains(t, string(body), "live.js", p)
	}
	resp := serve(s, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/static/", nil))
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	for _, f := range []string{"/static/live.js", "/static/style.css"} {
		resp := serve(s, httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+f, nil))
		require.Equal(t, http.StatusOK, resp.StatusCode, f)
	}
}

// The scheme of an Authorization header is case-insensitive (RFC 7235): "bearer T" is "Bearer T".
func TestToken_BearerSchemeInAnyCase(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{Token: "s3cret", ReadOnly: true})
	for header, want := range map[string]int{
		"Bearer s3cret":  http.StatusNotFound, // past authentication: no such page
		"bearer s3cret":  http.StatusNotFound,
		"BEARER s3cret":  http.StatusNotFound,
		"Bearer  s3cret": http.StatusNotFound,
		"bearer wrong":   http.StatusUnauthorized,
		"Basic s3cret":   http.StatusUnauthorized,
		"Bearers3cret":   http.StatusUnauthorized,
		"bearer":         http.StatusUnauthorized,
	} {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/nothing-here", nil)
		req.Header.Set("Authorization", header)
		require.Equal(t, want, serve(s, req).StatusCode, header)
	}
}

// When the registry can not be read, the overview keeps the time of the figures it shows and says
// since when and why they are not new: no fresh "last at" over old figures.
func TestOverview_RegistryFailingKeepsTheTimeOfTheFiguresAndSaysSince(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{ReadOnly: true})
	old := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	s.sampler.mu.Lock()
	s.sampler.series["public.events"] = &series{reg: queueReg{Name: "public.events", Table: "public.events"},
		samples: []sample{{at: old, stats: Stats{Pending: 7, Ready: 7}}}}
	s.sampler.queues = []string{"public.events"}
	s.sampler.at = old
	s.sampler.mu.Unlock()

	failedAt := time.Now()
	s.Sample(context.Background()) // the pool never connects: listing the queues fails
	resp := serve(s, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	page := string(b)
	lastAt := regexp.MustCompile(`last at ([0-9TZ:-]+)`).FindStringSubmatch(page)
	require.NotNil(t, lastAt, page)
	require.Equal(t, timetext.Format(old), lastAt[1], "the time of the figures shown, not of the failed pass")
	require.Contains(t, page, `id="stale"`, "a notice that the figures are not live")
	since := regexp.MustCompile(`since ([0-9TZ:-]+)`).FindStringSubmatch(page)
	require.NotNil(t, since, "since when reading fails: %s", page)
	at, err := time.Parse(timetext.Layout, since[1])
	require.NoError(t, err)
	require.WithinRange(t, at, failedAt.Add(-time.Second), time.Now())
	require.Contains(t, page, "outbox.queues", "why")
}

// Two consoles on one host (two local ports: two SSH tunnels to two environments) keep their own
// cookies: a browser keeps cookies by name, host and path, not port, and with one fixed name each
// console's page replaced the other's CSRF and auth cookies, so each refused the other's next
// action (403) or asked for its token again. Their names differ; an action of A passes with B's
// cookies beside its own.
func TestCSRF_TwoConsolesOnOneHostKeepTheirOwnCookies(t *testing.T) {
	t.Parallel()
	a := newTestServer(t, Config{Token: "a-secret"})
	b := newTestServer(t, Config{Token: "b-secret"})
	require.NotEqual(t, a.cookies.csrf, b.cookies.csrf)
	require.NotEqual(t, a.cookies.auth, b.cookies.auth)
	require.NotEqual(t, a.cookies.flash, b.cookies.flash)

	// The page with ?token= sets the auth cookie (and redirects); the next page, the CSRF cookie.
	cookiesOf := func(s *Server, token string) []*http.Cookie {
		got := serve(s, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/?token="+token, nil)).Cookies()
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
		for _, c := range got {
			req.AddCookie(c)
		}
		return append(got, serve(s, req).Cookies()...)
	}
	jar := append(cookiesOf(a, "a-secret"), cookiesOf(b, "b-secret")...) // A's page, then B's
	var aCSRF, aAuth *http.Cookie
	for _, c := range jar {
		switch c.Name {
		case a.cookies.csrf:
			aCSRF = c
		case a.cookies.auth:
			aAuth = c
		}
	}
	require.NotNil(t, aCSRF, "A's CSRF cookie survives B's page")
	require.NotNil(t, aAuth, "A's auth cookie survives B's page")
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/actions/requeue?csrf="+a.mac("csrf", aCSRF.Value),
		strings.NewReader("queue=public.none&all=yes"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range jar {
		req.AddCookie(c)
	}
	// Past authentication and the CSRF check, the action answers that no such queue is registered.
	require.Equal(t, http.StatusBadRequest, serve(a, req).StatusCode)
}
