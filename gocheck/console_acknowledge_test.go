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

// An operator acknowledges a firing alert on the escalations page (alr.acknowledge_alert, through
// the operator's login in pgdrain_operator): a confirmation asking for an optional note, then its
// ladder stops (nobody is paged further), the alert stays firing and is listed as acknowledged with
// who and the note; a second acknowledgement changes nothing and says so; once resolved, it is listed
// under "Recently resolved" (alr.resolved_alerts, through the reader's login) with its
// acknowledgement. The reader's login can not acknowledge.
func TestConsole_AcknowledgeAnAlertAndSeeTheResolvedOnes(t *testing.T) {
	t.Parallel()
	b := newConsoleBundle(t)
	ctx := context.Background()
	log := &syncBuffer{}
	c := startConsole(t, console.Config{Reader: b.reader, Operator: b.operator}, log)
	outcome := func() string {
		code, page := c.get("/escalations")
		require.Equal(t, http.StatusOK, code, page)
		m := regexp.MustCompile(`(?s)<div class="flash [^"]+" role="status" id="outcome">.*?</div>`).FindString(page)
		require.NotEmpty(t, m, "no outcome")
		return m
	}

	_, page := c.get("/escalations")
	token := csrfField.FindStringSubmatch(page)[1]
	require.Regexp(t, `(?s)<section class="ladder[^"]*" data-alert="`+b.alertID+`">.*?action="/actions/acknowledge\?csrf=[0-9a-f]+".*?Acknowledge…`, page)
	require.Contains(t, page, `<p class="ok" id="acknowledged">None.</p>`)
	require.Contains(t, page, `<p class="ok" id="resolved">None yet.</p>`)

	ack := url.Values{"alert": {b.alertID}, "csrf": {token}}
	code, page := c.post("/actions/acknowledge", ack)
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "alr.acknowledge_alert")
	require.Contains(t, page, `<input id="reason" name="reason"`)
	ack.Set("confirm", "yes")
	ack.Set("reason", "looking into it")
	code, _ = c.post("/actions/acknowledge", ack)
	require.Equal(t, http.StatusSeeOther, code)
	o := outcome()
	require.Contains(t, o, "<strong>Done:</strong> acknowledged alert &#34;api 5xx above 2%&#34;")
	require.Contains(t, o, "<li>running ladders 1 → 0</li>")
	var by, note, state, stop string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		SELECT k.acknowledged_by, k.note, a.state, e.stop_reason
		FROM alr.alerts a JOIN alr.alert_acknowledgements k ON k.alert_id = a.id JOIN alr.alert_escalations e ON e.alert_id = a.id
		WHERE a.id = $1::uuid`, b.alertID).Scan(&by, &note, &state, &stop))
	require.Equal(t, []string{b.opLogin, "looking into it (via pgdrain web, local)", "firing", "acknowledged"}, []string{by, note, state, stop})
	require.Contains(t, log.String(), `action=/actions/acknowledge alert=`+b.alertID+` note="looking into it" acknowledged=true running_ladders_stopped=1 changed=true`)

	_, page = c.get("/escalations")
	require.NotContains(t, page, `<section class="ladder`, "the acknowledged alert's ladder is not running any more")
	require.Regexp(t, `(?s)<tr data-alert="`+b.alertID+`" class="acked">.*?api 5xx above 2%.*?`+b.opLogin+`.*?looking into it \(via pgdrain web, local\).*?Resolve alert…`, page)

	code, _ = c.post("/actions/acknowledge", ack)
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, outcome(), "<strong>Nothing changed:</strong> alert &#34;api 5xx above 2%&#34; ("+b.alertID+") was already acknowledged: nothing changed")

	code, _ = c.post("/actions/resolve", url.Values{"alert": {b.alertID}, "csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, outcome(), "<li>state firing → resolved</li>")
	_, page = c.get("/escalations")
	require.Contains(t, page, `<p class="ok" id="acknowledged">None.</p>`)
	require.Regexp(t, `(?s)<table class="grid stack" id="resolved">.*?<tr data-alert="`+b.alertID+`">.*?api 5xx above 2%.*? by `+b.opLogin+` \(looking into it \(via pgdrain web, local\)\)`, page)

	_, err := b.reader.Exec(ctx, `SELECT alr.acknowledge_alert($1::uuid)`, b.alertID)
	require.ErrorContains(t, err, "42501", "the reader's login can not acknowledge")
}
