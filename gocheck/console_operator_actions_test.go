package gocheck

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/console"
)

// The queue page's skip, retry-now and dismiss (outbox.poison_row, retry_row, dismiss_poisoned)
// work through an operator login with exactly what docs/security.md documents for them — membership
// in pgdrain_operator, no privilege on the queue table — go through a confirmation that asks for a
// reason, need the CSRF token, are fenced by what the page showed (a second click changes nothing
// and says so), are logged by the console and in outbox.operator_actions with the person who asked,
// and the page after each says what changed; the queue page lists and counts them through the
// reader's login (outbox.operator_log).
func TestConsole_SkipRetryAndDismissWithTheDocumentedGrants(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	ctx := context.Background()
	opLogin := consoleLogin(t, b.db, "pgdrain_operator")
	var anyTablePriv bool
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		SELECT bool_or(has_column_privilege($1, 'public.events', a.attname, p))
		FROM pg_attribute a, unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']) p
		WHERE a.attrelid = 'public.events'::regclass AND a.attnum > 0 AND NOT a.attisdropped`, opLogin).Scan(&anyTablePriv))
	require.False(t, anyTablePriv, "the operator's login has no privilege on the queue table")
	operator := consolePool(t, consoleURL(b.db, opLogin))

	log := &syncBuffer{}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: operator}, log)
	outcome := func() string {
		code, page := c.get("/queues/public.events")
		require.Equal(t, http.StatusOK, code, page)
		m := regexp.MustCompile(`(?s)<div class="flash [^"]+" role="status" id="outcome">.*?</div>`).FindString(page)
		require.NotEmpty(t, m, "no outcome")
		return m
	}
	row := func(id int) (attempts int, backingOff, sent bool, lastError string) {
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			SELECT attempt_count, COALESCE(next_attempt_at > now(), false), sent_at IS NOT NULL, COALESCE(last_error, '')
			FROM public.events WHERE id = $1`, id).Scan(&attempts, &backingOff, &sent, &lastError))
		return
	}

	_, page := c.get("/queues/public.events")
	token := csrfField.FindStringSubmatch(page)[1]
	require.Regexp(t, `(?s)<tr data-key="acct-1">.*?action="/actions/retry\?csrf=[0-9a-f]+".*?name="id" value="1".*?name="attempts" value="2".*?Retry now…`, page)
	require.Regexp(t, `(?s)<tr data-key="acct-1">.*?action="/actions/skip\?csrf=[0-9a-f]+".*?name="id" value="1".*?name="attempts" value="2".*?Skip…`, page)
	require.Regexp(t, `(?s)<tr data-id="3">.*?action="/actions/dismiss\?csrf=[0-9a-f]+".*?name="id" value="3".*?Dismiss…`, page)
	require.Contains(t, page, `<p class="ok" id="operator-actions">None.</p>`)

	// Without the CSRF token: refused before anything else.
	code, _ := c.post("/actions/skip", url.Values{"queue": {b.queue}, "id": {"1"}, "attempts": {"2"}, "reason": {"x"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusForbidden, code)

	// Retry now: the confirmation names the function and asks for an optional reason; then the
	// backoff ends; a second click changes nothing.
	retry := url.Values{"queue": {b.queue}, "id": {"1"}, "attempts": {"2"}, "csrf": {token}}
	code, page = c.post("/actions/retry", retry)
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "end the backoff of row 1 (at 2 attempt(s))")
	require.Contains(t, page, "outbox.retry_row")
	require.Contains(t, page, `<input id="reason" name="reason"`)
	_, backingOff, _, _ := row(1)
	require.True(t, backingOff, "the confirmation changes nothing")
	retry.Set("confirm", "yes")
	retry.Set("reason", "peer fixed")
	code, _ = c.post("/actions/retry", retry)
	require.Equal(t, http.StatusSeeOther, code)
	o := outcome()
	require.Contains(t, o, "<strong>Done:</strong> retried row 1 of public.events: its backoff ended")
	require.Contains(t, o, "<li>backing off 1 → 0</li>")
	attempts, backingOff, _, _ := row(1)
	require.False(t, backingOff)
	require.Equal(t, 2, attempts, "no attempt counted")
	code, _ = c.post("/actions/retry", retry)
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, outcome(), "<strong>Nothing changed:</strong> row 1 of public.events was not retried: it is no longer backing off at 2 attempt(s)")

	// Skip: a reason is required; a stale attempt count changes nothing; then the head is poisoned
	// with the reason and its key is no longer wedged.
	skip := url.Values{"queue": {b.queue}, "id": {"1"}, "attempts": {"2"}, "csrf": {token}}
	code, page = c.post("/actions/skip", skip)
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "outbox.poison_row")
	require.Contains(t, page, `required placeholder=`)
	skip.Set("confirm", "yes")
	skip.Set("reason", "  ")
	code, page = c.post("/actions/skip", skip)
	require.Equal(t, http.StatusBadRequest, code, page)
	require.Contains(t, page, "reason: must not be blank")
	skip.Set("reason", "the peer rejects this payload for ever <b>503</b>")
	skip.Set("attempts", "1")
	code, _ = c.post("/actions/skip", skip)
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, outcome(), "<strong>Nothing changed:</strong> row 1 of public.events was not skipped: it is no longer pending at 1 attempt(s)")
	attempts, _, _, _ = row(1)
	require.Equal(t, 2, attempts)
	skip.Set("attempts", "2")
	code, _ = c.post("/actions/skip", skip)
	require.Equal(t, http.StatusSeeOther, code)
	o = outcome()
	require.Contains(t, o, "<strong>Done:</strong> skipped row 1 of public.events: poisoned with your reason")
	require.Contains(t, o, "<li>poisoned 2 → 3</li>")
	require.Contains(t, o, "<li>key acct-1 no longer wedged</li>")
	attempts, _, _, lastError := row(1)
	require.Equal(t, 3, attempts, "poisoned: attempt_count = max_attempts")
	require.Contains(t, lastError, "the peer rejects this payload for ever <b>503</b> (via pgdrain web, local)")

	// Dismiss: poisoned row 3 for good; again: nothing changed.
	dismiss := url.Values{"queue": {b.queue}, "id": {"3"}, "csrf": {token}}
	code, page = c.post("/actions/dismiss", dismiss)
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "dismiss poisoned row(s) 3 for good")
	require.Contains(t, page, "outbox.dismiss_poisoned")
	dismiss.Set("confirm", "yes")
	dismiss.Set("reason", "duplicate of an event delivered by hand")
	code, _ = c.post("/actions/dismiss", dismiss)
	require.Equal(t, http.StatusSeeOther, code)
	o = outcome()
	require.Contains(t, o, "<strong>Done:</strong> dismissed 1 poisoned row(s) of public.events (3) for good")
	require.Contains(t, o, "<li>poisoned 3 → 2</li>")
	_, _, sent, _ := row(3)
	require.True(t, sent, "a dismissed row is kept as history (sent_at set)")
	code, _ = c.post("/actions/dismiss", dismiss)
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, outcome(), "<strong>Nothing changed:</strong> row(s) 3 of public.events: not poisoned any more")

	// Logged by the console (who asked, what changed) and in outbox.operator_actions (the login and
	// the person in the reason); the queue page counts and lists them through the reader's login.
	require.Contains(t, log.String(), "action=/actions/retry queue=public.events id=1 attempts=2 reason=\"peer fixed\" retried=true changed=true")
	require.Contains(t, log.String(), "skipped=true changed=true")
	require.Contains(t, log.String(), "dismissed=1 changed=true")
	rows, err := b.db.Pool.Query(ctx, `SELECT action || ' ' || row_id || ' ' || acted_by || ' ' || reason FROM outbox.operator_actions ORDER BY action_id`)
	require.NoError(t, err)
	var logged []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		logged = append(logged, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"retry 1 " + opLogin + " peer fixed (via pgdrain web, local)",
		"poison 1 " + opLogin + " the peer rejects this payload for ever <b>503</b> (via pgdrain web, local)",
		"dismiss 3 " + opLogin + " duplicate of an event delivered by hand (via pgdrain web, local)",
	}, logged)
	_, page = c.get("/queues/public.events")
	require.Contains(t, page, `In all, 3: <span class="count" data-action="poison">poison 1</span>, <span class="count" data-action="retry">retry 1</span>, <span class="count" data-action="dismiss">dismiss 1</span>.`)
	require.Contains(t, page, "the peer rejects this payload for ever &lt;b&gt;503&lt;/b&gt; (via pgdrain web, local)")
	require.NotContains(t, page, "<b>503</b>")

	// The reader's login can not act, whatever the console is asked.
	_, err = b.reader.Exec(ctx, `SELECT outbox.poison_row('public.events', 5, 0, 'no')`)
	require.ErrorContains(t, err, "42501")
}
