package gocheck

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
)

// A webhook peer's error pages are recorded whatever they hold (issue 31): a multi-byte
// character across the sink's 256-byte excerpt, a NUL byte, invalid UTF-8, a megabyte of text.
// Each result is recorded once: the event the peer accepted is POSTed once, the refused ones
// (400) once and poisoned, the transient ones (302, 500) max_attempts times and then poisoned
// (the queue being unpartitioned). last_error holds the status and a clean excerpt. Before, every
// apply_results / settle_locked call carrying such an excerpt failed (SQLSTATE 22021): no result
// was ever recorded, and the accepted event was POSTed again and again.
func TestRelay_WebhookErrorPagesCostNoResult(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{maxAttempts: errTextMaxAttempts})
		ops := []string{"accepted", "split", "nul", "invalid", "huge", "redirect"}
		errTextEnqueue(t, q, ops)
		var mu sync.Mutex
		posts := map[string]int{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var env struct {
				Data drEvent `json:"data"`
			}
			body, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(body, &env); err != nil {
				t.Errorf("the peer got a body that is not an envelope: %s", body)
			}
			mu.Lock()
			posts[env.Data.Op]++
			mu.Unlock()
			switch env.Data.Op {
			case "accepted":
				w.WriteHeader(http.StatusNoContent)
			case "split": // 'é' is bytes 256 and 257
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, strings.Repeat("a", 255)+"é")
			case "nul":
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, "bad\x00request")
			case "invalid":
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, "\xff\xfe not JSON")
			case "huge":
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, strings.Repeat("日", 1<<20))
			case "redirect":
				w.WriteHeader(http.StatusFound)
				_, _ = io.WriteString(w, "moved \xc3")
			}
		}))
		defer srv.Close()
		_, _, stop := rlStart(t, loginPool(t, q.db, "pgdrain_worker"), []relay.Route{rlWebhookRoute(t, q, mode, srv.URL)})
		errTextSettle(t, q, len(ops), stop)

		rows := errTextRows(t, q)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[string]int{"accepted": 1, "split": 1, "nul": 1, "invalid": 1, "huge": 3, "redirect": 3}, posts,
			"POSTs per event: the accepted one once, refusals once, transient failures max_attempts times")
		require.Equal(t, map[string]errTextRow{
			"accepted": {sent: true},
			"split":    {attempts: 3, lastErr: "peer answered 400 Bad Request: " + strings.Repeat("a", 255)},
			"nul":      {attempts: 3, lastErr: "peer answered 400 Bad Request: bad\uFFFDrequest"},
			"invalid":  {attempts: 3, lastErr: "peer answered 400 Bad Request: \uFFFD not JSON"},
			"huge":     {attempts: 3, lastErr: "peer answered 500 Internal Server Error: " + strings.Repeat("日", 85)},
			"redirect": {attempts: 3, lastErr: "peer answered 302 Found: moved \uFFFD (redirects are not followed: fix the URL)"},
		}, rows)
	})
}
