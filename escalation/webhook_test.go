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

// Config.Validate names the field out of range; New applies defaults first.
func TestConfig_ValidateNamesTheField(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, Config{BatchSize: MaxBatchSize + 1}.withDefaults().Validate(), "BatchSize must be between 1 and 10000")
	require.ErrorContains(t, Config{Lease: -1}.withDefaults().Validate(), "Lease must be between")
	require.ErrorContains(t, Config{StepTimeout: -1}.withDefaults().Validate(), "StepTimeout must be positive")
	d := Config{}.withDefaults()
	require.NoError(t, d.Validate())
	require.Equal(t, DefaultBatchSize, d.BatchSize)
	require.Equal(t, DefaultLease, d.Lease)
	_, err := New(nil, nil, Config{})
	require.ErrorContains(t, err, "pool must not be nil")
}
