package escalation

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
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
