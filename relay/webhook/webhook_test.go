package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

const (
	oldSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	newSecret = "whsec_" + "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" // bytes 0..31
)

// The specification's own example: this signature is what every Standard Webhooks library
// computes for it.
func TestSign_MatchesTheSpecificationsExample(t *testing.T) {
	t.Parallel()
	sig, err := webhook.Sign([]string{oldSecret}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	require.NoError(t, err)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", sig)
}

// peer is an httptest endpoint that checks every request's signatures with its own HMAC code
// (not the package's) and answers with respond.
type peer struct {
	t       *testing.T
	secrets []string
	respond func(w http.ResponseWriter, r *http.Request, body []byte)

	mu       sync.Mutex
	requests []received
}

type received struct {
	header http.Header
	body   []byte
}

func (p *peer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	require.NoError(p.t, err)
	p.mu.Lock()
	p.requests = append(p.requests, received{header: r.Header.Clone(), body: body})
	p.mu.Unlock()
	if r.Method != http.MethodPost || !p.verify(r.Header, body) {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if p.respond == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	p.respond(w, r, body)
}

// verify checks that webhook-signature holds one v1 signature per secret, in order, each the
// base64 HMAC-SHA256 of "id.timestamp.body" under that secret's key.
func (p *peer) verify(h http.Header, body []byte) bool {
	sigs := strings.Split(h.Get("webhook-signature"), " ")
	if len(sigs) != len(p.secrets) {
		return false
	}
	for i, s := range p.secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		require.NoError(p.t, err)
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "." + string(body)))
		if sigs[i] != "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)) {
			return false
		}
	}
	return true
}

func newPeer(t *testing.T, secrets []string, respond func(http.ResponseWriter, *http.Request, []byte)) (*peer, *httptest.Server) {
	p := &peer{t: t, secrets: secrets, respond: respond}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv
}

// identityPrefix starts every test event's identity: an event_id (a uuid) the test can read.
const identityPrefix = "0f0e0d0c-0000-4000-8000-"

// identity is the event_id of test event id.
func identity(id int64) string { return fmt.Sprintf("%s%012d", identityPrefix, id) }

func event(id int64, key string) relay.Event {
	return relay.Event{Queue: "public.orders", ID: id, Identity: identity(id), Type: "order.created",
		PartitionKey: key, CreatedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Payload: json.RawMessage(`{"order":42}`)}
}

func deliver(t *testing.T, s *webhook.Sink, events ...relay.Event) []relay.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.Deliver(ctx, events)
}

// Two secrets (a rotation): every request carries two signatures, each checked by the peer; the
// body is the Standard Webhooks envelope; webhook-id is the event identity; the timestamp is now.
func TestSink_SignsEveryRequestWithEverySecret(t *testing.T) {
	t.Parallel()
	p, srv := newPeer(t, []string{oldSecret, newSecret}, nil)
	s, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{oldSecret, newSecret},
		Headers: map[string]string{"Authorization": "Bearer t0ken"}})
	require.NoError(t, err)
	defer s.Close()
	res := deliver(t, s, event(1, "a"), event(2, "b"))
	require.Equal(t, []relay.Result{relay.SentResult(), relay.SentResult()}, res)
	require.Len(t, p.requests, 2)
	for _, r := range p.requests {
		require.Contains(t, []string{identity(1), identity(2)}, r.header.Get("webhook-id"))
		ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
		require.NoError(t, err)
		require.InDelta(t, time.Now().Unix(), ts, 60)
		require.Equal(t, "Bearer t0ken", r.header.Get("Authorization"))
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		require.JSONEq(t, `{"type":"order.created","timestamp":"2026-11-30T12:00:00Z","data":{"order":42}}`, string(r.body))
		require.NoError(t, webhook.Verify([]string{newSecret}, r.header, r.body, time.Now(), webhook.DefaultTolerance),
			"a receiver that has only the new secret accepts it")
	}
}

// A peer with the wrong secret refuses (401): that is permanent, as every other 4xx.
func TestSink_WrongSecretIsRefusedPermanently(t *testing.T) {
	t.Parallel()
	_, srv := newPeer(t, []string{newSecret}, nil)
	s, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{oldSecret}, Body: webhook.BodyPayload})
	require.NoError(t, err)
	res := deliver(t, s, event(1, "a"))
	require.Equal(t, relay.Permanent, res[0].Outcome)
	require.EqualError(t, res[0].Err, "peer answered 401 Unauthorized")
}

// Every status class maps to its outcome; Retry-After comes back as seconds or an HTTP date.
func TestSink_ClassifiesAnswers(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		status     int
		retryAfter string
		outcome    relay.Outcome
		wantDelay  time.Duration // approximate for dates
	}{
		{200, "", relay.Sent, 0},
		{204, "", relay.Sent, 0},
		{400, "", relay.Permanent, 0},
		{404, "", relay.Permanent, 0},
		{410, "", relay.Permanent, 0},
		{422, "", relay.Permanent, 0},
		{408, "", relay.Transient, 0},
		{421, "", relay.Transient, 0},
		{425, "", relay.Transient, 0},
		{429, "12", relay.Transient, 12 * time.Second},
		{500, "", relay.Transient, 0},
		{503, date, relay.Transient, 90 * time.Second},
		{302, "", relay.Transient, 0},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			_, srv := newPeer(t, []string{oldSecret}, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				if tc.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte("why not"))
			})
			s, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{oldSecret}})
			require.NoError(t, err)
			res := deliver(t, s, event(7, "k"))[0]
			require.Equal(t, tc.outcome, res.Outcome, "status %d", tc.status)
			require.InDelta(t, tc.wantDelay.Seconds(), res.RetryAfter.Seconds(), 2)
			if tc.outcome != relay.Sent {
				require.Contains(t, res.Err.Error(), strconv.Itoa(tc.status))
				require.Contains(t, res.Err.Error(), "why not", "the peer's answer goes into last_error")
			}
		})
	}
}

// The peer's body goes into the error as a recordable excerpt of at most 256 bytes: ending before
// a character the limit splits, invalid UTF-8 and NUL bytes as U+FFFD (issue 31: PostgreSQL
// refuses such bytes, and with them the whole batch of results).
func TestSink_ErrorExcerptIsRecordableText(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ body, want string }{
		"two-byte character across byte 256":  {strings.Repeat("a", 255) + "é", strings.Repeat("a", 255)},
		"four-byte character across byte 256": {strings.Repeat("a", 254) + "😀 more", strings.Repeat("a", 254)},
		"NUL byte":                            {"bad\x00request", "bad\uFFFDrequest"},
		"invalid UTF-8":                       {"\xff\xfe not JSON", "\uFFFD not JSON"},
		"a megabyte of text":                  {strings.Repeat("日", 1<<20), strings.Repeat("日", 85)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, srv := newPeer(t, []string{oldSecret}, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, tc.body)
			})
			s, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{oldSecret}})
			require.NoError(t, err)
			res := deliver(t, s, event(7, "k"))[0]
			require.Equal(t, relay.Permanent, res.Outcome)
			require.EqualError(t, res.Err, "peer answered 400 Bad Request: "+tc.want)
		})
	}
}

// A peer slower than the delivery's deadline, and a peer that is not there, are transient.
func TestSink_TimeoutsAndConnectionErrorsAreTransient(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	_, slow := newPeer(t, []string{oldSecret}, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	s, err := webhook.New(webhook.Config{URL: slow.URL, Secrets: []string{oldSecret}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res := s.Deliver(ctx, []relay.Event{event(1, "a")})[0]
	require.Equal(t, relay.Transient, res.Outcome)
	require.ErrorIs(t, res.Err, context.DeadlineExceeded)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nobody listens there now
	s, err = webhook.New(webhook.Config{URL: "http://user:hunter2@" + addr + "/services/T0001/SLACKSECRETPATH?api_key=SUPERSECRET",
		Secrets: []string{oldSecret}})
	require.NoError(t, err)
	res = deliver(t, s, event(1, "a"))[0]
	require.Equal(t, relay.Transient, res.Outcome)
	require.True(t, strings.HasPrefix(res.Err.Error(), "POST http://"+addr+"/…: "), "%v", res.Err)
	for _, secret := range []string{"hunter2", "SLACKSECRETPATH", "SUPERSECRET"} {
		require.NotContains(t, res.Err.Error(), secret, "what the URL may hold as a credential stays out of last_error")
	}
	var opErr *net.OpError
	require.True(t, errors.As(res.Err, &opErr), "%v", res.Err)
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	require.Equal(t, 30*time.Second, webhook.RetryAfter("30", now))
	require.Equal(t, 2*time.Minute, webhook.RetryAfter("Mon, 30 Nov 2026 12:02:00 GMT", now))
	require.Zero(t, webhook.RetryAfter("Mon, 30 Nov 2026 11:00:00 GMT", now), "a date in the past")
	require.Zero(t, webhook.RetryAfter("soon", now))
	require.Zero(t, webhook.RetryAfter("-5", now))
	require.Zero(t, webhook.RetryAfter("", now))
	require.Equal(t, webhook.MaxRetryAfter, webhook.RetryAfter("172800", now), "at most a day")
	require.Equal(t, webhook.MaxRetryAfter, webhook.RetryAfter("Thu, 03 Dec 2026 12:00:00 GMT", now), "a date too is at most a day ahead")
	require.Equal(t, webhook.MaxRetryAfter, webhook.RetryAfter("99999999999999999999", now), "seconds past an int64 are a long time, not none")
	require.Zero(t, webhook.RetryAfter("-99999999999999999999", now))
}

func TestVerify_RefusesStaleAndForged(t *testing.T) {
	t.Parallel()
	body := []byte(`{"a":1}`)
	sig, err := webhook.Sign([]string{oldSecret}, "id-1", 1000, body)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("webhook-id", "id-1")
	h.Set("webhook-timestamp", "1000")
	h.Set("webhook-signature", sig)
	require.NoError(t, webhook.Verify([]string{newSecret, oldSecret}, h, body, time.Unix(1000, 0), time.Minute))
	require.ErrorIs(t, webhook.Verify([]string{oldSecret}, h, body, time.Unix(1000+120, 0), time.Minute), webhook.ErrTimestamp)
	require.ErrorIs(t, webhook.Verify([]string{oldSecret}, h, []byte(`{"a":2}`), time.Unix(1000, 0), time.Minute), webhook.ErrNoMatchingSigner)
	require.ErrorIs(t, webhook.Verify([]string{newSecret}, h, body, time.Unix(1000, 0), time.Minute), webhook.ErrNoMatchingSigner)
	h.Del("webhook-id")
	require.ErrorIs(t, webhook.Verify([]string{oldSecret}, h, body, time.Unix(1000, 0), time.Minute), webhook.ErrMissingHeaders)
}

func TestConfig_ValidateNamesEveryField(t *testing.T) {
	t.Parallel()
	err := webhook.Config{URL: "ftp://x", Secrets: []string{"abc", "whsec_!!", "whsec_AAAA"},
		Headers: map[string]string{"webhook-id": "x"}, Body: "xml"}.Validate()
	require.Error(t, err)
	require.Equal(t, []string{
		`URL must be an absolute http:// or https:// URL, got "ftp://x"`,
		`Secrets[0] must start with "whsec_"`,
		`Secrets[1] must be whsec_ followed by base64: illegal base64 data at input byte 0`,
		`Secrets[2] must hold a key of 24 to 64 bytes, as the specification asks, got 3`,
		`Headers may not set webhook-id: the sink or HTTP sets it`,
		`Body must be "envelope" or "payload", got "xml"`,
	}, strings.Split(err.Error(), "\n"))
	require.EqualError(t, webhook.Config{}.Validate(), "URL must be set to the endpoint (http:// or https://)\n"+
		"Secrets must list at least one signing secret (whsec_<base64>)")
}

// The event's headers are sent, below the operator's Config.Headers and never in place of the
// sink's own (webhook-*, Content-Type) or HTTP's (Content-Length, Connection); a header HTTP
// cannot carry refuses the event for good instead of failing every retry the same way.
func TestSink_SendsTheEventsHeadersButNotOverTheReservedOnes(t *testing.T) {
	t.Parallel()
	p, srv := newPeer(t, []string{oldSecret}, nil)
	s, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{oldSecret},
		Headers: map[string]string{"X-Tenant": "operator"}})
	require.NoError(t, err)
	e := event(1, "a")
	e.Headers = map[string]string{
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"X-Custom":    "yes",
		"X-Tenant":    "producer",
		"webhook-id":  "forged", "Webhook-Signature": "v1,forged", "content-type": "text/plain",
		"Content-Length": "1", "Connection": "close",
	}
	require.Equal(t, relay.SentResult(), deliver(t, s, e)[0])
	require.Len(t, p.requests, 1)
	h := p.requests[0].header
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", h.Get("Traceparent"))
	require.Equal(t, "yes", h.Get("X-Custom"))
	require.Equal(t, "operator", h.Get("X-Tenant"), "the operator's header wins over the producer's")
	require.Equal(t, identity(1), h.Get("webhook-id"))
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.NotEqual(t, "v1,forged", h.Get("webhook-signature"))
	require.Empty(t, h.Get("Connection"))

	for name, value := range map[string]string{"X-Bad": "line\r\nX-Injected: 1", "bad name": "x"} {
		e := event(2, "b")
		e.Headers = map[string]string{name: value}
		res := deliver(t, s, e)[0]
		require.Equal(t, relay.Permanent, res.Outcome, "header %q", name)
		require.Contains(t, res.Err.Error(), "the event's header")
	}
	require.Len(t, p.requests, 1, "nothing was sent for the bad headers")
}

// By default a producer sends its x-* headers and the trace context, nothing else: not a
// credential (Authorization, Cookie), not what proxies trust (X-Forwarded-For), not what changes
// the request (Expect, Host) and not the sink's own under another spelling (Webhook_signature,
// Content_Type). EventHeaders widens or narrows that, and lets a sensitive header through only when
// it names it exactly.
func TestSink_EventHeadersAllowList(t *testing.T) {
	t.Parallel()
	p, srv := newPeer(t, []string{oldSecret}, nil)
	produced := map[string]string{
		"Authorization": "Bearer producer", "Cookie": "session=stolen", "X-Forwarded-For": "10.0.0.1",
		"Expect": "100-continue", "Webhook_signature": "v1,forged", "Content_Type": "text/plain", "Host": "evil.example",
		"Proxy-Authorization": "Basic x", "X-HTTP-Method-Override": "DELETE", "X-Real-IP": "10.0.0.2",
		"Accept": "text/html", "X-Tenant": "acme", "x_region": "eu", "X-Acme-Region": "eu",
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v",
	}
	send := func(cfg webhook.Config) http.Header {
		t.Helper()
		cfg.URL, cfg.Secrets = srv.URL, []string{oldSecret}
		s, err := webhook.New(cfg)
		require.NoError(t, err)
		defer s.Close()
		before := len(p.requests)
		e := event(1, "a")
		e.Headers = produced
		require.Equal(t, relay.SentResult(), deliver(t, s, e)[0])
		require.Len(t, p.requests, before+1)
		return p.requests[before].header
	}

	h := send(webhook.Config{})
	for _, name := range []string{"Authorization", "Cookie", "X-Forwarded-For", "Expect", "Webhook_signature",
		"Content_Type", "Proxy-Authorization", "X-HTTP-Method-Override", "X-Real-IP", "Accept"} {
		require.Empty(t, h.Values(name), "%s must not come from a producer by default", name)
	}
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, "acme", h.Get("X-Tenant"))
	require.Equal(t, "eu", h.Get("X_region"))
	require.Equal(t, "eu", h.Get("X-Acme-Region"))
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", h.Get("Traceparent"))
	require.Equal(t, "k=v", h.Get("Tracestate"))

	h = send(webhook.Config{EventHeaders: []string{"authorization", "X_Forwarded_For", "x-acme-*", "accept", "*",
		"traceparent"}})
	require.Equal(t, "Bearer producer", h.Get("Authorization"), "named exactly, a sensitive header goes")
	require.Equal(t, "10.0.0.1", h.Get("X-Forwarded-For"))
	require.Equal(t, "eu", h.Get("X-Acme-Region"))
	require.Equal(t, "text/html", h.Get("Accept"))
	require.Equal(t, "acme", h.Get("X-Tenant"), `"*" matches what is not sensitive`)
	for _, name := range []string{"Cookie", "Proxy-Authorization", "X-HTTP-Method-Override", "X-Real-IP", "Expect",
		"Webhook_signature", "Content_Type"} {
		require.Empty(t, h.Values(name), "%s: a prefix never matches it", name)
	}

	h = send(webhook.Config{EventHeaders: []string{}})
	require.Empty(t, h.Get("X-Tenant"), "an empty list sends none")
	require.Empty(t, h.Get("Traceparent"))
}

func TestConfig_ValidateHeaders(t *testing.T) {
	t.Parallel()
	err := webhook.Config{URL: "http://x/", Secrets: []string{oldSecret},
		Headers:      map[string]string{"Webhook_Signature": "x", "Expect": "100-continue", "bad name": "x", "X-Ok": "a\nb"},
		EventHeaders: []string{"x-*", "*", "webhook-*", "Content_Type", "host", "bad name", "a*b*", ""}}.Validate()
	require.Error(t, err)
	require.Equal(t, []string{
		`Headers may not set Expect: the sink or HTTP sets it`,
		`Headers may not set Webhook_Signature: the sink or HTTP sets it`,
		`Headers has a value with a control character for X-Ok`,
		`Headers has an invalid header name "bad name"`,
		`EventHeaders[2] may not let events set webhook-*: the sink or HTTP sets it`,
		`EventHeaders[3] may not let events set Content_Type: the sink or HTTP sets it`,
		`EventHeaders[4] may not let events set host: the sink or HTTP sets it`,
		`EventHeaders[5] must be a header name, or a prefix ending in "*", got "bad name"`,
		`EventHeaders[6] must be a header name, or a prefix ending in "*", got "a*b*"`,
		`EventHeaders[7] must be a header name, or a prefix ending in "*", got ""`,
	}, strings.Split(err.Error(), "\n"))
}

// A URL that does not parse is shown as written, but for its password.
func TestConfig_ValidateShowsABadURLWithoutItsPassword(t *testing.T) {
	t.Parallel()
	err := webhook.Config{URL: "https://hook:s3cret@exa mple.com/in?x=1", Secrets: []string{oldSecret}}.Validate()
	require.EqualError(t, err, `URL must be an absolute http:// or https:// URL, got "https://hook:xxxxx@exa mple.com/in?x=1"`)
	err = webhook.Config{URL: "hooks.example.com/in", Secrets: []string{oldSecret}}.Validate()
	require.EqualError(t, err, `URL must be an absolute http:// or https:// URL, got "hooks.example.com/in"`)
	err = webhook.Config{URL: "https://hook:s3cret@hooks.example.com:port/in", Secrets: []string{oldSecret}}.Validate()
	require.EqualError(t, err, `URL must be an absolute http:// or https:// URL, got "https://hook:xxxxx@hooks.example.com:port/in"`)
}
