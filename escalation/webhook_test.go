package escalation

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/relay/webhook"
)

// A webhook answering outside 2xx is a failed delivery; the error names the status.
func TestWebhookNotifier_Non2xxIsAnError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "e1:2", r.Header.Get("Idempotency-Key"))
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	err := WebhookNotifier{URL: srv.URL}.Notify(context.Background(), Step{EscalationID: "e1", StepIdx: 2})
	require.ErrorContains(t, err, "502 Bad Gateway")
}

// With Secrets, a step is signed as the relay's webhook sink signs events (Standard Webhooks):
// webhook.Verify accepts it with one of the secrets, webhook-id is the step's idempotency key, and
// the configured headers go along without replacing the notifier's own.
func TestWebhookNotifier_SignsLikeTheRelay(t *testing.T) {
	t.Parallel()
	const old, current = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25kLXNlY3JldC1vZi10d2VudHktZm91cg=="
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		require.NoError(t, webhook.Verify([]string{current}, r.Header, body, time.Now(), webhook.DefaultTolerance))
		require.NoError(t, webhook.Verify([]string{old}, r.Header, body, time.Now(), webhook.DefaultTolerance))
		require.ErrorIs(t, webhook.Verify([]string{"whsec_b3RoZXItc2VjcmV0LW9mLXR3ZW50eS1mb3VyLWJ5dGVz"}, r.Header, body, time.Now(), webhook.DefaultTolerance),
			webhook.ErrNoMatchingSigner)
		got <- r
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	n := WebhookNotifier{URL: srv.URL, Secrets: []string{old, current},
		Headers: map[string]string{"X-Team": "sre", "Content-Type": "text/plain"}}
	require.NoError(t, n.Notify(context.Background(), Step{EscalationID: "e1", StepIdx: 2, AlertName: "db down"}))
	r := <-got
	require.Equal(t, "e1:2", r.Header.Get(webhook.HeaderID))
	require.Equal(t, "sre", r.Header.Get("X-Team"))
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	require.Len(t, strings.Fields(r.Header.Get(webhook.HeaderSignature)), 2, "one signature per secret")

	err := WebhookNotifier{URL: srv.URL, Secrets: []string{"not-a-secret"}}.Notify(context.Background(), Step{EscalationID: "e1"})
	require.ErrorContains(t, err, `signing webhook: secret 0 must start with "whsec_"`)
}

// A peer that reads a step's whole request and then drops the (reused, keep-alive) connection
// without answering gets the step once: the delivery fails, and Go's transport does not send it
// again (it repeats a request carrying Idempotency-Key on such a connection: the peer got every
// such step twice). The same with a client of the caller's.
func TestWebhookNotifier_AStepIsSentOnceWhenTheConnectionDropsAfterTheRequest(t *testing.T) {
	t.Parallel()
	for name, client := range map[string]*http.Client{"default client": nil, "caller's client": {}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			posts := map[string]int{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				key := r.Header.Get("Idempotency-Key")
				mu.Lock()
				posts[key]++
				mu.Unlock()
				if key == "e1:0" {
					w.WriteHeader(http.StatusOK) // the first step: the connection stays open for the next
					return
				}
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					if tcp, ok := conn.(*net.TCPConn); ok {
						_ = tcp.SetLinger(0)
					}
					_ = conn.Close()
				}
			}))
			defer srv.Close()
			n := WebhookNotifier{URL: srv.URL, Client: client}
			require.NoError(t, n.Notify(context.Background(), Step{EscalationID: "e1", StepIdx: 0}))
			err := n.Notify(context.Background(), Step{EscalationID: "e1", StepIdx: 1})
			require.Error(t, err, "no answer: a failed delivery")
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, map[string]int{"e1:0": 1, "e1:1": 1}, posts, "each step posted once")
		})
	}
}

// By default a redirect is a failed delivery, never followed: a 301 or 303 followed turned the
// POST into a GET without its body, which a 200 counted as delivered; a 307 re-posted the body and
// its headers to another host.
func TestWebhookNotifier_ARedirectIsAFailedDelivery(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/new-home", http.StatusMovedPermanently)
		case "/see-other":
			http.Redirect(w, r, "/new-home", http.StatusSeeOther)
		case "/temporary":
			http.Redirect(w, r, "/new-home", http.StatusTemporaryRedirect)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	for _, path := range []string{"/moved", "/see-other", "/temporary"} {
		err := WebhookNotifier{URL: srv.URL + path}.Notify(context.Background(), Step{EscalationID: "e1"})
		require.ErrorContains(t, err, "redirects are not followed", path)
	}
	mu.Lock()
	require.Equal(t, []string{"POST /moved", "POST /see-other", "POST /temporary"}, got, "nothing followed")
	got = nil
	mu.Unlock()
	// A client of the caller's that follows redirects: whatever it did, no delivery.
	for _, path := range []string{"/moved", "/see-other", "/temporary"} {
		err := WebhookNotifier{URL: srv.URL + path, Client: &http.Client{}}.Notify(context.Background(), Step{EscalationID: "e1"})
		require.ErrorContains(t, err, "not followed", path)
	}
}

// A webhook URL's path, query and user are its secret (Slack, Teams): a failed delivery's error,
// which goes to the journal and the logs, names its scheme and host only.
func TestWebhookNotifier_ErrorsNameNoSecretOfTheURL(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	closed := httptest.NewServer(http.NotFoundHandler())
	closedHost := strings.TrimPrefix(closed.URL, "http://")
	closed.Close()
	for target, want := range map[string]string{
		"http://user:hunter2@" + host + "/services/T0/B0/SLACKSECRET?token=abc": "http://" + host + "/…",
		"http://" + closedHost + "/hooks/SLACKSECRET?token=abc":                 "http://" + closedHost + "/…",
	} {
		err := WebhookNotifier{URL: target}.Notify(context.Background(), Step{EscalationID: "e1"})
		require.Error(t, err)
		require.Contains(t, err.Error(), want)
		for _, secret := range []string{"hunter2", "SLACKSECRET", "token=abc", "user"} {
			require.NotContains(t, err.Error(), secret)
		}
	}
}

// A peer's refusal says why in its body (Slack answers 403 "invalid_token", 404
// "channel_not_found"; a rate limit says when to come back): the failed delivery's error, which
// the journal keeps, carries an excerpt of it, made recordable (a NUL or invalid UTF-8 in an
// error page would otherwise cost the journal row) and cut to 256 bytes. Before, the error named
// only the status, and on call could not tell a revoked token from a deleted channel.
func TestWebhookNotifier_ARefusalKeepsAnExcerptOfThePeersReason(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Idempotency-Key") {
		case "e1:0":
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte("invalid_token\x00\xff\n"))
		case "e1:1":
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":"rate_limited","retry_after":30}` + strings.Repeat("x", 1<<20)))
		default:
			w.WriteHeader(http.StatusBadGateway) // no body: the status alone, as before
		}
	}))
	defer srv.Close()
	n := WebhookNotifier{URL: srv.URL}

	err := n.Notify(context.Background(), Step{EscalationID: "e1", StepIdx: 0})
	require.EqualError(t, err, "posting webhook: "+srv.URL+" answered 403 Forbidden: invalid_token\uFFFD\uFFFD")

	err = n.Notify(context.Background(), Step{EscalationID: "e1", StepIdx: 1})
	require.ErrorContains(t, err, `answered 429 Too Many Requests: {"error":"rate_limited","retry_after":30}xxx`)
	require.LessOrEqual(t, len(err.Error()), len("posting webhook: "+srv.URL+" answered 429 Too Many Requests: ")+256,
		"a megabyte error page is cut")

	err = n.Notify(context.Background(), Step{EscalationID: "e1", StepIdx: 2})
	require.EqualError(t, err, "posting webhook: "+srv.URL+" answered 502 Bad Gateway")
}

// A delivery the peer accepted is a delivery whatever the client does with the request on its way:
// Go's http.Client sends a copy of it when the client has a Timeout or the URL carries a user and
// password (basic auth), and so do wrapping transports (tracing); none of that is a redirect.
// Before, the notifier took any response to another *http.Request than its own for a followed
// redirect: every step posted through a client with a Timeout, or to https://user:pass@host/..., was
// journaled as failed ("redirected to" the same URL) although the peer had it, and counted as such.
// A redirect a caller's client follows is still a failed delivery.
func TestWebhookNotifier_ACopiedRequestIsNoRedirect(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	posts := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/hook", http.StatusMovedPermanently)
			return
		}
		if r.URL.Path == "/basic" {
			if user, pass, ok := r.BasicAuth(); !ok || user != "pager" || pass != "s3cret" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	withUser := strings.Replace(srv.URL, "http://", "http://pager:s3cret@", 1)
	step := Step{EscalationID: "e1", StepIdx: 0}

	require.NoError(t, WebhookNotifier{URL: withUser + "/basic"}.Notify(context.Background(), step),
		"a URL with a user and password: the default client sends a copy with an Authorization header")
	require.NoError(t, WebhookNotifier{URL: srv.URL + "/hook", Client: &http.Client{Timeout: 30 * time.Second}}.Notify(context.Background(), step),
		"a caller's client with a Timeout sends a copy")
	cloning := &http.Client{Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		return http.DefaultTransport.RoundTrip(r.Clone(r.Context())) // as a tracing transport does
	})}
	require.NoError(t, WebhookNotifier{URL: srv.URL + "/hook", Client: cloning}.Notify(context.Background(), step),
		"a transport that clones the request")

	err := WebhookNotifier{URL: srv.URL + "/moved", Client: &http.Client{Timeout: 30 * time.Second}}.Notify(context.Background(), step)
	require.ErrorContains(t, err, "redirects are not followed", "a redirect the caller's client followed is no delivery")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"/basic": 1, "/hook": 3, "/moved": 1}, posts)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
