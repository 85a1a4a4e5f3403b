package console

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// newTestServer is a console whose pools never connect (nothing here reaches the database: the
// checks run before any page or action reads).
func newTestServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg.Reader = pool
	if !cfg.ReadOnly {
		cfg.Operator = pool
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg)
	require.NoError(t, err)
	return s
}

func serve(s *Server, req *http.Request) *http.Response {
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec.Result()
}

func cookieNamed(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// A ?token= visit redirects to the same page without the token, and "the same page" is a path on
// this server: //evil.example/ (a scheme-relative address) and /\evil.example/ stay here.
func TestToken_RedirectStaysOnThisSite(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{Token: "s3cret", ReadOnly: true})
	for target, want := range map[string]string{
		"//evil.example/?token=s3cret":             "/evil.example/",
		"///evil.example/x?token=s3cret&a=1":       "/evil.example/x?a=1",
		"/%5Cevil.example/?token=s3cret":           "/%5Cevil.example/",
		"/%2F%2Fevil.example/?token=s3cret":        "/%2F%2Fevil.example/",
		"/queues/public.events?token=s3cret&b=two": "/queues/public.events?b=two",
		"/?token=s3cret":                           "/",
	} {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/", nil)
		req.URL, _ = url.ParseRequestURI(target)
		req.RequestURI = target
		resp := serve(s, req)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, target)
		loc := resp.Header.Get("Location")
		require.Equal(t, want, loc, target)
		u, err := url.Parse(loc)
		require.NoError(t, err)
		require.Empty(t, u.Host, "%s redirects off-site to %s", target, loc)
		require.False(t, strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, `/\`), loc)
	}
	// Also as a browser sends it, through a real server.
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET //evil.example/?token=s3cret HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", ts.Listener.Addr())
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/evil.example/", resp.Header.Get("Location"))
}

// Cookies are Secure when the browser reaches the console over TLS (directly, or through a proxy
// that says X-Forwarded-Proto: https), and not over plain HTTP, where a browser would drop them.
func TestCookies_SecureWhenServedOverTLS(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{Token: "s3cret"})
	ts := httptest.NewTLSServer(s.Handler())
	t.Cleanup(ts.Close)
	client := ts.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Get(ts.URL + "/?token=s3cret")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	auth := cookieNamed(resp, s.cookies.auth)
	require.NotNil(t, auth)
	require.True(t, auth.Secure, "the auth cookie over TLS")
	require.True(t, auth.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, auth.SameSite)

	req, err := http.NewRequest(http.MethodGet, ts.URL+"/", nil)
	require.NoError(t, err)
	req.AddCookie(auth)
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	csrf := cookieNamed(resp, s.cookies.csrf)
	require.NotNil(t, csrf)
	require.True(t, csrf.Secure, "the CSRF cookie over TLS")

	rec := httptest.NewRecorder()
	tlsReq := httptest.NewRequest(http.MethodGet, "https://127.0.0.1/", nil)
	tlsReq.TLS = &tls.ConnectionState{}
	s.setFlash(rec, tlsReq, outcome{Changed: true, Text: "done"})
	flash := cookieNamed(rec.Result(), s.cookies.flash)
	require.NotNil(t, flash)
	require.True(t, flash.Secure, "the flash cookie over TLS")

	proxied := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/?token=s3cret", nil)
	proxied.Header.Set("X-Forwarded-Proto", "https")
	require.True(t, cookieNamed(serve(s, proxied), s.cookies.auth).Secure, "behind a TLS proxy")

	plain := serve(s, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/?token=s3cret", nil))
	require.False(t, cookieNamed(plain, s.cookies.auth).Secure, "over plain HTTP a Secure cookie would be dropped")
}

// The auth cookie expires after SessionTTL (12h by default): the browser is told, and the server
// refuses a cookie past its signed expiry even if the browser kept it.
func TestAuthCookie_Expires(t *testing.T) {
	t.Parallel()
	require.Equal(t, 12*time.Hour, Config{}.withDefaults().SessionTTL)
	s := newTestServer(t, Config{Token: "s3cret", ReadOnly: true, SessionTTL: time.Hour})
	before := time.Now()
	resp := serve(s, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/?token=s3cret", nil))
	auth := cookieNamed(resp, s.cookies.auth)
	require.NotNil(t, auth)
	require.Equal(t, 3600, auth.MaxAge)
	require.WithinDuration(t, before.Add(time.Hour), auth.Expires, 2*time.Second)

	get := func(value string) int {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
		req.AddCookie(&http.Cookie{Name: s.cookies.auth, Value: value})
		return serve(s, req).StatusCode
	}
	require.Equal(t, http.StatusOK, get(auth.Value))
	require.True(t, s.validAuthCookie(auth.Value, time.Now().Add(59*time.Minute)))
	require.False(t, s.validAuthCookie(auth.Value, time.Now().Add(61*time.Minute)), "an hour later it is worth nothing")
	require.Equal(t, http.StatusUnauthorized, get(s.authCookieValue(time.Now().Add(-time.Second))), "a correctly signed, expired cookie")
	exp, mac, _ := strings.Cut(auth.Value, ".")
	_ = exp
	require.Equal(t, http.StatusUnauthorized, get("99999999999."+mac), "an expiry moved by the holder breaks the signature")
	require.Equal(t, http.StatusUnauthorized, get(s.mac("auth", "s3cret")), "the old, never-expiring form")

	_, err := New(Config{Reader: s.cfg.Reader, SessionTTL: time.Second})
	require.ErrorContains(t, err, "SessionTTL must be at least 1m0s")
}

// A blank token (or one a header could not carry) is refused, not taken as "no authentication"
// or as a secret of white space.
func TestConfig_RefusesABlankToken(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{ReadOnly: true})
	for _, token := range []string{" ", "\t\n", " s3cret", "s3cret "} {
		_, err := New(Config{Reader: s.cfg.Reader, Token: token})
		require.ErrorContains(t, err, "Token must not be blank", "%q", token)
	}
}

// Basic auth compares the password even when the user name is wrong, and every comparison sees
// SHA-256 digests of equal length: neither the user name, nor its length, nor which of the two
// was wrong shows in the time an answer takes.
func TestBasicAuth_ComparesUserAndPasswordAlikeInConstantTime(t *testing.T) {
	var mu sync.Mutex
	var calls [][2][]byte
	orig := constantTimeEqual
	constantTimeEqual = func(a, b []byte) int {
		mu.Lock()
		calls = append(calls, [2][]byte{append([]byte(nil), a...), append([]byte(nil), b...)})
		mu.Unlock()
		return orig(a, b)
	}
	t.Cleanup(func() { constantTimeEqual = orig })

	s := newTestServer(t, Config{BasicUser: "ops", BasicPassword: "correct horse", ReadOnly: true})
	try := func(user, password string) (int, [][2][]byte) {
		calls = nil
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
		req.SetBasicAuth(user, password)
		return serve(s, req).StatusCode, calls
	}
	code, ok := try("ops", "correct horse")
	require.Equal(t, http.StatusOK, code)
	for _, tc := range [][2]string{{"nobody", "correct horse"}, {"ops", "wrong"}, {"a-much-longer-user-name", "x"}, {"", ""}} {
		code, seen := try(tc[0], tc[1])
		require.Equal(t, http.StatusUnauthorized, code, tc)
		require.Len(t, seen, len(ok), "%v: as many comparisons as a good login (no short circuit on the user name)", tc)
		for _, c := range seen {
			require.Len(t, c[0], 32, "digests, not the secrets: lengths do not show")
			require.Len(t, c[1], 32)
		}
	}
}

// The status line after an action comes from a cookie this process signed: a cookie another local
// origin sets (cookies do not isolate ports) is not shown, nor is an expired one.
func TestFlash_OnlyASignedFreshMessageIsShown(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{ReadOnly: true})
	page := func(value string) string {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
		req.AddCookie(&http.Cookie{Name: s.cookies.flash, Value: value})
		resp := serve(s, req)
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	rec := httptest.NewRecorder()
	s.setFlash(rec, httptest.NewRequest(http.MethodPost, "http://127.0.0.1/actions/purge", nil),
		outcome{Changed: true, Text: "deleted 2 sent row(s).", Lines: []string{"<b>x</b> 2 → 0"}})
	signed := cookieNamed(rec.Result(), s.cookies.flash)
	require.Contains(t, page(signed.Value), `<div class="flash changed" role="status" id="outcome"><p><strong>Done:</strong> deleted 2 sent row(s).</p><ul><li>&lt;b&gt;x&lt;/b&gt; 2 → 0</li></ul></div>`)
	rec = httptest.NewRecorder()
	s.setFlash(rec, httptest.NewRequest(http.MethodPost, "http://127.0.0.1/actions/release", nil), outcome{Text: "row 7 was not leased any more."})
	require.Contains(t, page(cookieNamed(rec.Result(), s.cookies.flash).Value),
		`<div class="flash unchanged" role="status" id="outcome"><p><strong>Nothing changed:</strong> row 7 was not leased any more.</p></div>`,
		"an action that changed nothing does not look like one that worked")

	for name, forged := range map[string]string{
		"as the old console wrote it": url.QueryEscape("everything is fine, go back to sleep"),
		"signed by another process":   newTestServer(t, Config{ReadOnly: true}).flashValue(`{"changed":true,"text":"everything is fine"}`, time.Now().Add(time.Minute)),
		"a signed message altered":    strings.Replace(signed.Value, signed.Value[:4], "ZXZl", 1),
		"expired":                     s.flashValue(`{"changed":true,"text":"an old message"}`, time.Now().Add(-time.Second)),
	} {
		body := page(forged)
		require.NotContains(t, body, `class="flash"`, name)
	}
}

// spyBody records whether anything read the request body.
type spyBody struct {
	r    io.Reader
	read bool
}

func (b *spyBody) Read(p []byte) (int, error) { b.read = true; return b.r.Read(p) }
func (b *spyBody) Close() error               { return nil }

// A POST passes the CSRF check (origin, cookie, token in the address or a header) before anything
// reads its body; a multipart body is never parsed, even with the right token.
func TestCSRF_CheckedBeforeTheBodyIsRead(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{})
	resp := serve(s, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil))
	cookie := cookieNamed(resp, s.cookies.csrf)
	require.NotNil(t, cookie)
	token := s.mac("csrf", cookie.Value)

	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	require.NoError(t, w.WriteField("queue", "public.events"))
	require.NoError(t, w.WriteField("all", "yes"))
	require.NoError(t, w.WriteField("csrf", token))
	require.NoError(t, w.WriteField("confirm", "yes"))
	fw, err := w.CreateFormFile("upload", "big.bin")
	require.NoError(t, err)
	_, _ = fw.Write(bytes.Repeat([]byte("x"), 1<<20))
	require.NoError(t, w.Close())

	post := func(target string, header map[string]string, withCookie bool) (int, bool) {
		body := &spyBody{r: bytes.NewReader(mp.Bytes())}
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+target, nil)
		req.Body = body
		req.ContentLength = int64(mp.Len())
		req.Header.Set("Content-Type", w.FormDataContentType())
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if withCookie {
			req.AddCookie(cookie)
		}
		return serve(s, req).StatusCode, body.read
	}

	code, read := post("/actions/requeue", nil, true)
	require.Equal(t, http.StatusForbidden, code, "the token only in the multipart body does not count")
	require.False(t, read, "the body was read before the CSRF check refused the request")
	wrong := "0" + token[1:]
	if token[0] == '0' { // else "0"+token[1:] is the right token, one run in 16
		wrong = "1" + token[1:]
	}
	code, read = post("/actions/requeue?csrf="+wrong, nil, true)
	require.Equal(t, http.StatusForbidden, code, "a wrong token")
	require.False(t, read)
	code, read = post("/actions/requeue?csrf="+token, nil, false)
	require.Equal(t, http.StatusForbidden, code, "no cookie")
	require.False(t, read)
	code, read = post("/actions/requeue?csrf="+token, map[string]string{"Sec-Fetch-Site": "same-site"}, true)
	require.Equal(t, http.StatusForbidden, code, "another origin of this site (another port of localhost)")
	require.False(t, read)
	code, read = post("/actions/requeue?csrf="+token, map[string]string{"Sec-Fetch-Site": "cross-site"}, true)
	require.Equal(t, http.StatusForbidden, code, "another site")
	require.False(t, read)
	code, read = post("/actions/requeue?csrf="+token, map[string]string{"Origin": "http://localhost:3000"}, true)
	require.Equal(t, http.StatusForbidden, code, "an Origin that is not this host")
	require.False(t, read)

	code, read = post("/actions/requeue?csrf="+token, map[string]string{"Sec-Fetch-Site": "same-origin"}, true)
	require.Equal(t, http.StatusUnsupportedMediaType, code, "past the check, only a URL-encoded form is read")
	require.False(t, read, "a multipart body is never parsed")

	// Past the check, a URL-encoded form is read, at most 64 KiB of it.
	big := "queue=" + strings.Repeat("x", maxFormBytes)
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/actions/requeue", strings.NewReader(big))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(csrfHeader, token)
	req.AddCookie(cookie)
	require.Equal(t, http.StatusRequestEntityTooLarge, serve(s, req).StatusCode)
}

// An outcome always fits its cookie (a browser drops one over 4 KiB, and the outcome with it):
// many changed figures are cut to "and N more", a long text at a character boundary.
func TestFlash_ABigOutcomeStillFitsItsCookie(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{ReadOnly: true})
	o := outcome{Changed: true, Text: strings.Repeat("é", 2000)}
	for i := range 60 {
		o.Lines = append(o.Lines, fmt.Sprintf("key %s%d no longer wedged", strings.Repeat("ключ", 40), i))
	}
	rec := httptest.NewRecorder()
	s.setFlash(rec, httptest.NewRequest(http.MethodPost, "http://127.0.0.1/actions/requeue", nil), o)
	c := cookieNamed(rec.Result(), s.cookies.flash)
	require.NotNil(t, c)
	require.Less(t, len(c.String()), 4000)
	var got outcome
	require.NoError(t, json.Unmarshal([]byte(s.readFlash(c.Value, time.Now())), &got))
	require.Len(t, got.Lines, maxOutcomeLines)
	require.Equal(t, "and 53 more", got.Lines[maxOutcomeLines-1])
	require.True(t, utf8.ValidString(got.Text) && strings.HasSuffix(got.Text, "…"))
}
