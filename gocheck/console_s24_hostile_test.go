package gocheck

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/console"
)

// Keys, event types, payloads and error texts that are markup, and error texts as long as pgdrain
// keeps them (4000 characters) on every listed row: every page renders (200), shows them as text,
// stays bounded, and an action on such a queue comes back to its page.
func TestConsole_HostileNamesAndTextsRenderAsText(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	ctx := context.Background()
	// Queue names are plain (create_queue refuses any other): the markup is in what producers and peers write.
	names := []string{"public.hostile_a", "public.hostile_b"}
	for _, n := range names {
		_, err := b.db.Pool.Exec(ctx, `SELECT outbox.create_queue($1, 'k', max_attempts => 1)`, n)
		require.NoError(t, err, n)
		_, err = b.db.Pool.Exec(ctx, `SELECT outbox.enqueue($1, '<b>t</b>', '{"x":"</script><script>alert(1)</script>"}', '<k onmouseover=alert(1)>' || g)
			FROM generate_series(1, 60) g`, n)
		require.NoError(t, err, n)
		// every row poisoned, with the longest error pgdrain keeps
		_, err = b.db.Pool.Exec(ctx, `UPDATE `+quoteQueueTable(t, b, n)+` SET attempt_count = 1,
			last_error = repeat('<script>alert(1)</script>', 160), created_at = now() - interval '1 hour'`)
		require.NoError(t, err, n)
		_, err = b.db.Pool.Exec(ctx, `SELECT outbox.repair($1)`, n)
		require.NoError(t, err, n)
		_, err = b.db.Pool.Exec(ctx, `GRANT SELECT ON `+quoteQueueTable(t, b, n)+` TO `+b.readerLogin+`, `+b.opLogin)
		require.NoError(t, err, n)
	}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, &syncBuffer{})
	code, page := c.get("/")
	require.Equal(t, http.StatusOK, code, page)
	require.NotContains(t, page, "<img src=x")
	for _, n := range names {
		var name string
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT queue FROM outbox.queues WHERE table_oid = $1::regclass`, n).Scan(&name))
		path := "/queues/" + url.PathEscape(name)
		code, qp := c.get(path)
		require.Equal(t, http.StatusOK, code, "%s: %s", path, qp[:min(len(qp), 2000)])
		require.NotContains(t, qp, "<script>alert")
		require.NotContains(t, qp, "<k onmouseover")
		require.NotContains(t, qp, "<img src=x")
		require.Less(t, len(qp), 2<<20, "a page of 50 rows with 4000-character errors")
		token := c.csrf(path)
		code, res := c.post("/actions/requeue", url.Values{"csrf": {token}, "queue": {name}, "all": {"yes"}, "confirm": {"yes"}})
		require.Equal(t, http.StatusSeeOther, code, res)
		code, res = c.get(path)
		require.Equal(t, http.StatusOK, code, res)
		require.Contains(t, res, "requeued 60 poisoned row(s)")
	}
}

func quoteQueueTable(t *testing.T, b *consoleBundle, n string) string {
	t.Helper()
	var s string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT $1::regclass::text`, n).Scan(&s))
	return s
}
