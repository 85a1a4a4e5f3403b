package escalation

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
