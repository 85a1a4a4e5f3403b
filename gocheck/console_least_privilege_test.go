package gocheck

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/console"
)

// "Requeue all of a key" works with exactly the grants docs/security.md documents: it reads the
// key's poisoned ids through the operator's login, which has SELECT on those four columns; the
// reader's login has no privilege on the queue table but the payload column (for previews), and
// gets none through the action. Without the operator's grant the action fails and says which
// GRANT it needs.
func TestConsole_RequeueAllOfAKeyWorksWithTheDocumentedGrants(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	ctx := context.Background()
	priv := func(login, column, what string) bool {
		var ok bool
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT has_column_privilege($1, 'public.events', $2, $3)`,
			login, column, what).Scan(&ok))
		return ok
	}
	for _, col := range []string{"id", "account_id", "attempt_count", "sent_at", "last_error"} {
		require.False(t, priv(b.readerLogin, col, "SELECT"), "the reader may not select %s", col)
	}
	require.True(t, priv(b.readerLogin, "payload", "SELECT"))
	require.False(t, priv(b.opLogin, "payload", "SELECT"), "the operator reads no payload")
	require.False(t, priv(b.opLogin, "attempt_count", "UPDATE"))

	log := &syncBuffer{}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, log)
	token := c.csrf("/queues/public.events")
	code, page := c.post("/actions/requeue", url.Values{"queue": {b.queue}, "key": {"acct-3"}, "csrf": {token}})
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, `the 2 poisoned row(s) of key &#34;acct-3&#34;`)
	code, page = c.post("/actions/requeue", url.Values{"queue": {b.queue}, "key": {"acct-3"}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code, page)
	var poisoned int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM public.events WHERE attempt_count >= 3`).Scan(&poisoned))
	require.Zero(t, poisoned, "both poisoned rows of acct-3 were requeued")
	require.Contains(t, log.String(), "key=acct-3 all=false requeued=2")
	require.NotContains(t, log.String(), "42501")
	require.False(t, priv(b.readerLogin, "id", "SELECT"))

	// Without the documented grant the action says what is missing, and nothing changes.
	_, err := b.db.Pool.Exec(ctx, `UPDATE public.events SET attempt_count = 3 WHERE (payload->>'n')::int = 3`)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, fmt.Sprintf("REVOKE SELECT (id, account_id, attempt_count, sent_at) ON public.events FROM %s",
		pgx.Identifier{b.opLogin}.Sanitize()))
	require.NoError(t, err)
	code, page = c.post("/actions/requeue", url.Values{"queue": {b.queue}, "key": {"acct-3"}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusForbidden, code, page)
	require.Contains(t, page, "SQLSTATE 42501")
	require.Contains(t, page, "GRANT SELECT (id, account_id, attempt_count, sent_at) ON public.events TO that login")
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM public.events WHERE attempt_count >= 3`).Scan(&poisoned))
	require.Equal(t, 1, poisoned)
}
