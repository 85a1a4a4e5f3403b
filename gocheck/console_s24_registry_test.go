package gocheck

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/console"
)

// A reader whose login may not read the registry (outbox.queues) knows no queue. The overview says
// so; the queue page (a bookmark, a link from an alert) answered 404 "No queue named public.events
// is registered (outbox.queues)", and an action 400 "no queue named public.events is registered":
// both told the operator the queue does not exist, when its registry could not be read. They
// answer 503 with why the registry could not be read.
func TestConsole_AQueueThePagesCanNotLookUpIsNotCalledUnregistered(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	// The reader keeps the alr tables (the escalations page and its forms) but not the registry.
	_, err := b.db.Pool.Exec(context.Background(), `REVOKE SELECT ON outbox.queues FROM pgdrain_reader`)
	require.NoError(t, err)
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, &syncBuffer{})
	code, page := c.get("/")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "permission denied for table queues", "the overview says why it lists nothing")

	code, page = c.get("/queues/public.events")
	require.Equal(t, http.StatusServiceUnavailable, code, page)
	require.NotContains(t, page, "is registered")
	require.Contains(t, page, "could not be read")
	require.Contains(t, page, "permission denied for table queues")

	token := c.csrf("/escalations")
	for _, path := range []string{"/actions/requeue", "/actions/skip", "/actions/purge"} {
		code, page = c.post(path, url.Values{"csrf": {token}, "queue": {b.queue}, "id": {"3"}, "attempts": {"3"}, "older_than": {"7d"}})
		require.Equal(t, http.StatusServiceUnavailable, code, "%s: %s", path, page)
		require.NotContains(t, page, "is registered", path)
		require.Contains(t, page, "permission denied for table queues", path)
	}
}
