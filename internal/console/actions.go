package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/internal/age"
	"github.com/pgdrain/pgdrain/internal/console/timetext"
)

// actionTimeout bounds one action (a purge runs at most purgeMaxRows/purgeChunk short chunks).
const actionTimeout = time.Minute

type field struct{ Name, Value string }

// confirmBody is the confirmation step every action shows first: what it will do, and a form that
// repeats the request with confirm=yes.
type confirmBody struct {
	Action string
	Lines  []string
	Fields []field
	Button string
	Back   string
	// Reason, when set, asks for a reason on the confirmation page (skip, retry, dismiss: the SQL
	// function logs it in outbox.operator_actions).
	Reason *reasonField
}

// reasonField is the reason input of a confirmation page.
type reasonField struct {
	Required bool
	Hint     string
}

func (s *Server) confirm(w http.ResponseWriter, r *http.Request, title string, b confirmBody) {
	b.Fields = append(b.Fields, field{"confirm", "yes"})
	nav := "queues"
	if b.Back == "/escalations" {
		nav = "escalations"
	}
	s.render(w, r, http.StatusOK, "confirm", pageData{Title: title, Nav: nav, Body: b})
}

// done logs the action with who asked and what it changed, leaves its outcome for the next page
// and redirects there.
func (s *Server) done(w http.ResponseWriter, r *http.Request, back string, o outcome, attrs ...any) {
	s.cfg.Logger.Info("console action", append(append([]any{"who", who(r), "remote", r.RemoteAddr, "action", r.URL.Path},
		attrs...), "changed", o.Changed)...)
	s.setFlash(w, r, o)
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// snapshot is what an action on a queue compares before and after: its gauges, and its wedged
// keys (partitioned queues). ok is false when it could not be read: the outcome then says what the
// SQL function returned, without figures.
type snapshot struct {
	ok      bool
	stats   Stats
	ready   int64 // stats.Ready without the rows behind wedged heads, as the pages show it
	blocked int64 // the rows behind wedged heads
	wedged  []string
}

// snapshot reads a queue's figures through the operator's connection (outbox.stats and
// outbox.wedged_partitions, both granted to pgdrain_operator).
func (s *Server) snapshot(ctx context.Context, q queueReg) snapshot {
	st, _, err := readStats(ctx, s.cfg.Operator, q)
	if err != nil {
		s.cfg.Logger.Debug("console action: reading the queue's figures failed", "queue", q.Name, "err", err)
		return snapshot{}
	}
	sn := snapshot{ok: true, stats: st, ready: st.Ready}
	if q.PartitionColumn != nil && st.OldestPendingAge != nil && *st.OldestPendingAge >= s.cfg.WedgedAfter {
		wd, err := readWedged(ctx, s.cfg.Operator, q.Name, s.cfg.WedgedAfter)
		if err != nil {
			s.cfg.Logger.Debug("console action: reading the wedged partitions failed", "queue", q.Name, "err", err)
			return snapshot{}
		}
		for _, w := range wd {
			sn.wedged = append(sn.wedged, w.PartitionKey)
			sn.blocked += max(0, w.Pending-1)
		}
		sn.blocked = min(sn.blocked, st.Ready)
		sn.ready -= sn.blocked
	}
	return sn
}

// changes lists the figures that differ between two snapshots ("poisoned 2 → 1", "key acct-3 no
// longer wedged"). Drainers work meanwhile, so not every change is the action's.
func changes(before, after snapshot) []string {
	if !before.ok || !after.ok {
		return nil
	}
	var lines []string
	for _, f := range []struct {
		name string
		a, b int64
	}{
		{"pending", before.stats.Pending, after.stats.Pending},
		{"ready", before.ready, after.ready},
		{"blocked", before.blocked, after.blocked},
		{"leased", before.stats.Leased, after.stats.Leased},
		{"backing off", before.stats.BackingOff, after.stats.BackingOff},
		{"poisoned", before.stats.Poisoned, after.stats.Poisoned},
	} {
		if f.a != f.b {
			lines = append(lines, fmt.Sprintf("%s %d → %d", f.name, f.a, f.b))
		}
	}
	for _, k := range before.wedged {
		if !slices.Contains(after.wedged, k) {
			lines = append(lines, fmt.Sprintf("key %s no longer wedged", shortKey(k)))
		}
	}
	for _, k := range after.wedged {
		if !slices.Contains(before.wedged, k) {
			lines = append(lines, fmt.Sprintf("key %s now wedged", shortKey(k)))
		}
	}
	return lines
}

func (s *Server) failed(w http.ResponseWriter, r *http.Request, back string, err error, attrs ...any) {
	s.failedNote(w, r, back, err, "", attrs...)
}

// failedNote is failed with a sentence after the error saying what to do about it.
func (s *Server) failedNote(w http.ResponseWriter, r *http.Request, back string, err error, note string, attrs ...any) {
	s.cfg.Logger.Warn("console action failed", append([]any{"who", who(r), "remote", r.RemoteAddr, "action", r.URL.Path, "err", err}, attrs...)...)
	status := http.StatusInternalServerError
	// 22021: the request carried bytes that are no text in the database's encoding (a NUL, broken
	// UTF-8 in a reason or a key): the client's mistake, as a bad argument is.
	// 42501: the console's own login may not do this (a grant docs/security.md lists is missing):
	// refused, not broken, so 403 as a read-only console's refusal.
	switch st := sqlState(err); st {
	case "42P01", "22023", "P0002", "22021":
		status = http.StatusBadRequest
	case "42501":
		status = http.StatusForbidden
	}
	text := describe(err)
	if note != "" {
		text += " " + note
	}
	s.message(w, r, status, "Action failed", text, back)
}

// formQueue reads the registered queue an action's form names and the page to go back to; ok is
// false after it answered (no such queue, or its table is gone).
func (s *Server) formQueue(w http.ResponseWriter, r *http.Request) (reg queueReg, back string, ok bool) {
	queue := r.PostFormValue("queue")
	v, reg, ok := s.sampler.view(queue, 0)
	if !ok {
		if why := s.sampler.unknownQueue(quoted(queue)); why != "" {
			s.message(w, r, http.StatusServiceUnavailable, "Queues not readable", why, "/")
			return reg, "", false
		}
		s.message(w, r, http.StatusBadRequest, "No such queue", fmt.Sprintf("queue: no queue named %s is registered", quoted(queue)), "/")
		return reg, "", false
	}
	back = "/queues/" + url.PathEscape(queue)
	if v.Gone {
		// The pages offer no action on it; a form shown before the drop gets the reason, not 500.
		s.message(w, r, http.StatusConflict, "Queue table gone", "queue "+queue+": "+goneText(v, time.Now()), back)
		return reg, "", false
	}
	return reg, back, true
}

func (s *Server) requeueAction(w http.ResponseWriter, r *http.Request) {
	reg, back, ok := s.formQueue(w, r)
	if !ok {
		return
	}
	queue := reg.Name
	// key_of names a key by a row of it (the queue page's forms: a key may be longer than a form may
	// be); key names it itself (a script's request, for a key that fits the form).
	ids, key, keyOfText, all := r.PostForm["id"], r.PostFormValue("key"), r.PostFormValue("key_of"), r.PostFormValue("all") == "yes"
	given := 0
	for _, b := range []bool{len(ids) > 0, key != "", keyOfText != "", all} {
		if b {
			given++
		}
	}
	if given != 1 {
		s.message(w, r, http.StatusBadRequest, "Nothing to requeue", "requeue: give one of id, key, key_of or all=yes", back)
		return
	}
	var keyOf int64
	if keyOfText != "" {
		var err error
		if keyOf, err = strconv.ParseInt(keyOfText, 10, 64); err != nil || keyOf < 1 {
			s.message(w, r, http.StatusBadRequest, "Bad row", fmt.Sprintf("key_of: must be the id of a row of the key, got %s", quoted(keyOfText)), back)
			return
		}
	}
	byKey := key != "" || keyOf > 0
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	var list []int64
	var what string
	switch {
	case all:
		what = "every poisoned row of " + queue
	case byKey:
		field := "key"
		if keyOf > 0 {
			field = "key_of"
		}
		if reg.PartitionColumn == nil || reg.PartitionType == nil {
			s.message(w, r, http.StatusBadRequest, "Queue without keys",
				fmt.Sprintf("%s: %s is not partitioned, so its rows have no key: requeue by id, or every poisoned row (all=yes)", field, queue), back)
			return
		}
		// Through the operator's login, the one that acts: docs/security.md grants it the columns
		// this reads; the reader's login needs nothing of the queue table.
		var found []int64
		var err error
		if keyOf > 0 {
			var exists bool
			if key, exists, err = keyOfRow(ctx, s.cfg.Operator, reg, keyOf); err == nil && !exists {
				s.message(w, r, http.StatusBadRequest, "Nothing to requeue", fmt.Sprintf(
					"key_of: %s has no row %d any more (requeued with a new id, or sent and purged, since the page was shown): reload the page", queue, keyOf), back)
				return
			}
			if err == nil {
				found, err = poisonedIDsOfKeyOfRow(ctx, s.cfg.Operator, reg, keyOf)
			}
		} else {
			found, err = poisonedIDsOfKey(ctx, s.cfg.Operator, reg, key)
		}
		if err != nil {
			note := ""
			if sqlState(err) == "42501" && reg.PartitionColumn != nil {
				note = fmt.Sprintf("Requeueing all of a key reads its poisoned ids through the operator's login (--operator-dsn): GRANT SELECT (id, %s, attempt_count, sent_at) ON %s TO that login.",
					quoteIdent(*reg.PartitionColumn), reg.Table)
			}
			s.failedNote(w, r, back, err, note, "queue", queue, "key", shortKey(key), "key_of", keyOf)
			return
		}
		// The confirmation names the rows it counted (up to maxKeyFence of them): the click requeues
		// those, not rows of the key poisoned between the two.
		var late int
		if shown := r.PostFormValue("ids"); shown != "" && r.PostFormValue("confirm") == "yes" {
			named, bad := distinctIDs(strings.Split(shown, ","))
			if bad != "" {
				s.message(w, r, http.StatusBadRequest, "Bad id", fmt.Sprintf("ids: must be positive integers separated by commas, got %s", quoted(bad)), back)
				return
			}
			found, late = onlyNamed(found, named)
		}
		if len(found) == 0 {
			s.message(w, r, http.StatusBadRequest, "Nothing to requeue", fmt.Sprintf("%s: %s has no poisoned row in %s", field, quoted(shortKey(key)), queue), back)
			return
		}
		list, what = found, fmt.Sprintf("the %d poisoned row(s) of key %s", len(found), quoted(shortKey(key)))
		if len(found) >= maxKeyRequeue {
			what = fmt.Sprintf("the first %d poisoned rows of key %s (more remain: requeue the key again for the rest)", len(found), quoted(shortKey(key)))
		}
		if late > 0 {
			what += fmt.Sprintf("; %d row(s) of the key poisoned since the confirmation stay poisoned", late)
		}
	default:
		var bad string
		if list, bad = distinctIDs(ids); bad != "" {
			s.message(w, r, http.StatusBadRequest, "Bad id", fmt.Sprintf("id: must be a positive integer, got %s", quoted(bad)), back)
			return
		}
		what = "poisoned row(s) " + joinIDs(list)
	}
	if r.PostFormValue("confirm") != "yes" {
		fields := []field{{"queue", queue}}
		switch {
		case all:
			fields = append(fields, field{"all", "yes"})
		case byKey:
			if keyOf > 0 {
				fields = append(fields, field{"key_of", strconv.FormatInt(keyOf, 10)})
			} else {
				fields = append(fields, field{"key", key})
			}
			if len(list) <= maxKeyFence {
				fields = append(fields, field{"ids", joinIDsComma(list)})
			}
		default:
			for _, id := range list {
				fields = append(fields, field{"id", strconv.FormatInt(id, 10)})
			}
		}
		s.confirm(w, r, "Requeue poisoned rows?", confirmBody{
			Action: "/actions/requeue", Fields: fields, Button: "Requeue", Back: back,
			Lines: []string{
				"Queue " + queue + ": requeue " + what + ".",
				"Each gets attempt_count 0 and is due now; on a partitioned queue it moves to the tail of its key with a new id (outbox.requeue_poisoned).",
			}})
		return
	}
	before := s.snapshot(ctx, reg)
	n, err := requeuePoisoned(ctx, s.cfg.Operator, queue, list)
	if err != nil {
		s.failed(w, r, back, err, "queue", queue, "ids", list, "key", shortKey(key), "all", all, "key_of", keyOf)
		return
	}
	after := s.snapshot(ctx, reg)
	s.sampler.refresh(ctx, queue)
	o := outcome{Changed: n > 0, Lines: changes(before, after)}
	switch {
	case n > 0 && all:
		o.Text = fmt.Sprintf("requeued %d poisoned row(s) of %s: every poisoned row, each due now with attempt_count 0.", n, queue)
	case n > 0:
		o.Text = fmt.Sprintf("requeued %d poisoned row(s) of %s (%s), each due now with attempt_count 0.", n, queue, what)
		if int(n) < len(list) {
			o.Lines = append([]string{fmt.Sprintf("%d of the %d row(s) asked for were not poisoned any more (requeued or sent since the page was shown)",
				len(list)-int(n), len(list))}, o.Lines...)
		}
	case all:
		o.Text = fmt.Sprintf("%s has no poisoned row: nothing was requeued.", queue)
	default:
		o.Text = fmt.Sprintf("%s of %s: not poisoned any more (requeued or sent since the page was shown), nothing was requeued.", what, queue)
	}
	s.done(w, r, back, o, "queue", queue, "ids", list, "key", shortKey(key), "all", all, "requeued", n, "key_of", keyOf)
}

func (s *Server) purgeAction(w http.ResponseWriter, r *http.Request) {
	reg, back, ok := s.formQueue(w, r)
	if !ok {
		return
	}
	queue := reg.Name
	text := strings.TrimSpace(r.PostFormValue("older_than"))
	olderThan, err := age.Parse(text)
	if err != nil {
		s.message(w, r, http.StatusBadRequest, "Bad age", "older_than: "+err.Error(), back)
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		s.confirm(w, r, "Purge sent rows?", confirmBody{
			Action: "/actions/purge", Fields: []field{{"queue", queue}, {"older_than", text}}, Button: "Purge", Back: back,
			Lines: []string{
				fmt.Sprintf("Queue %s: delete rows sent more than %s ago.", queue, human(olderThan)),
				fmt.Sprintf("In chunks of %d rows (outbox.purge_sent, each its own short transaction, skipping locked rows), at most %d rows this time; pending and poisoned rows are never touched.", purgeChunk, purgeMaxRows),
			}})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	before := s.snapshot(ctx, reg)
	n, err := purgeSent(ctx, s.cfg.Operator, queue, olderThan)
	if err != nil {
		s.failed(w, r, back, err, "queue", queue, "older_than", olderThan.String(), "deleted", n)
		return
	}
	after := s.snapshot(ctx, reg)
	s.sampler.refresh(ctx, queue)
	o := outcome{Changed: n > 0, Lines: changes(before, after),
		Text: fmt.Sprintf("deleted %d sent row(s) of %s older than %s.", n, queue, human(olderThan))}
	switch {
	case n == 0:
		o.Text = fmt.Sprintf("no row of %s was sent more than %s ago: nothing was deleted.", queue, human(olderThan))
	case n >= purgeMaxRows:
		o.Text += " That is the most one click deletes: purge again for more."
	}
	s.done(w, r, back, o, "queue", queue, "older_than", olderThan.String(), "deleted", n)
}

func (s *Server) releaseAction(w http.ResponseWriter, r *http.Request) {
	reg, back, ok := s.formQueue(w, r)
	if !ok {
		return
	}
	queue := reg.Name
	id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
	if err != nil {
		s.message(w, r, http.StatusBadRequest, "Bad row", fmt.Sprintf("id: must be a row id, got %s", quoted(r.PostFormValue("id"))), back)
		return
	}
	// The lease the page showed (its end): only that lease is ended. Without it, a lease that ran
	// out and was taken by a healthy worker before the click was ended instead.
	var until *time.Time
	if v := r.PostFormValue("leased_until"); v != "" {
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			s.message(w, r, http.StatusBadRequest, "Bad lease", fmt.Sprintf("leased_until: must be the time the lease ends (RFC 3339), got %s", quoted(v)), back)
			return
		}
		until = &at
	}
	if r.PostFormValue("confirm") != "yes" {
		fields := []field{{"queue", queue}, {"id", strconv.FormatInt(id, 10)}}
		which := fmt.Sprintf("Queue %s: end the lease of row %d now; it is claimable at once, no attempt counted.", queue, id)
		if until != nil {
			fields = append(fields, field{"leased_until", until.Format(time.RFC3339Nano)})
			which = fmt.Sprintf("Queue %s: end the lease of row %d that runs until %s now; it is claimable at once, no attempt counted. "+
				"If that lease has ended and another worker took the row meanwhile, nothing changes.", queue, id, timetext.Format(*until))
		}
		s.confirm(w, r, "End the lease?", confirmBody{
			Action: "/actions/release", Fields: fields, Button: "Release", Back: back,
			Lines: []string{
				which,
				"The worker holding it can no longer record a result for it: its lease token no longer matches (outbox.release_lease).",
			}})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	before := s.snapshot(ctx, reg)
	released, fenced, err := releaseLease(ctx, s.cfg.Operator, queue, id, until)
	if err != nil {
		s.failed(w, r, back, err, "queue", queue, "id", id)
		return
	}
	after := s.snapshot(ctx, reg)
	s.sampler.refresh(ctx, queue)
	o := outcome{Changed: released, Lines: changes(before, after),
		Text: fmt.Sprintf("released the lease of row %d of %s: it is claimable now, no attempt counted; its worker can no longer record a result for it.", id, queue)}
	if until != nil && !fenced {
		o.Text += " (The database's outbox schema is older than migration 00046, which can end only the lease shown: whatever lease the row had was ended. Run goose-run up.)"
	}
	if !released {
		o.Text = fmt.Sprintf("row %d of %s was not leased any more, or by another lease than the one shown (its lease had ended and a worker took it again, or its worker recorded a result, or it is gone): no lease was released.", id, queue)
		o.Lines = nil // what moved meanwhile is not this action's
	}
	s.done(w, r, back, o, "queue", queue, "id", id, "released", released)
}

// quoted puts what an operator or a client gave (a name, a key, a field's value) in double quotes
// as plain text, for a page, whose template escapes it for HTML. Go's %q showed escapes instead of
// the characters (\" for a quote, \u00a0 for a no-break space). Bytes that are no UTF-8 and control
// characters, which a page can not show, become U+FFFD; a line break or a tab a space.
func quoted(s string) string {
	return `"` + strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case unicode.IsControl(r):
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, string(utf8.RuneError))) + `"`
}

var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// quoteIdent quotes a name as PostgreSQL's quote_ident does (only when it must), for SQL shown to
// a person.
func quoteIdent(name string) string {
	if plainIdent.MatchString(name) {
		return name
	}
	return pgx.Identifier{name}.Sanitize()
}

// alertFailed answers a failed read of the alert an action names: 404 when no alert has that id
// (a client's mistake, or an alert gone since the page was shown), else as failed.
func (s *Server) alertFailed(w http.ResponseWriter, r *http.Request, back, alert string, err error) {
	if errors.Is(err, pgx.ErrNoRows) {
		s.message(w, r, http.StatusNotFound, "No such alert", fmt.Sprintf("alert: no alert with id %s", alert), back)
		return
	}
	s.failed(w, r, back, err, "alert", alert)
}

var uuidText = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func (s *Server) resolveAction(w http.ResponseWriter, r *http.Request) {
	const back = "/escalations"
	alert := r.PostFormValue("alert")
	if !uuidText.MatchString(alert) {
		s.message(w, r, http.StatusBadRequest, "Bad alert", fmt.Sprintf("alert: must be an alert id (uuid), got %s", quoted(alert)), back)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	if r.PostFormValue("confirm") != "yes" {
		name, state, err := readAlert(ctx, s.cfg.Reader, alert)
		if err != nil {
			s.alertFailed(w, r, back, alert, err)
			return
		}
		s.confirm(w, r, "Resolve the alert?", confirmBody{
			Action: "/actions/resolve", Fields: []field{{"alert", alert}}, Button: "Resolve", Back: back,
			Lines: []string{
				fmt.Sprintf("Resolve alert %s (%s, now %s).", quoted(name), alert, state),
				"Its running ladders stop at once; a step already taken by an engine is not delivered (alr.resolve_alert).",
			}})
		return
	}
	name, stateBefore, runningBefore, err := alertState(ctx, s.cfg.Operator, alert)
	if err != nil {
		s.alertFailed(w, r, back, alert, err)
		return
	}
	if err := resolveAlert(ctx, s.cfg.Operator, alert); err != nil {
		s.failed(w, r, back, err, "alert", alert)
		return
	}
	_, stateAfter, runningAfter, err := alertState(ctx, s.cfg.Operator, alert)
	if err != nil {
		s.failed(w, r, back, err, "alert", alert)
		return
	}
	o := outcome{Changed: stateBefore != stateAfter || runningBefore != runningAfter,
		Text: fmt.Sprintf("resolved alert %s (%s): its ladders are stopped and no further step is delivered.", quoted(name), alert)}
	if stateBefore != stateAfter {
		o.Lines = append(o.Lines, fmt.Sprintf("state %s → %s", stateBefore, stateAfter))
	}
	if runningBefore != runningAfter {
		o.Lines = append(o.Lines, fmt.Sprintf("running ladders %d → %d", runningBefore, runningAfter))
	}
	if !o.Changed {
		o.Text = fmt.Sprintf("alert %s (%s) was already %s with no running ladder: nothing was resolved.", quoted(name), alert, stateAfter)
	}
	s.done(w, r, back, o, "alert", alert, "state_before", stateBefore, "running_ladders_stopped", runningBefore-runningAfter)
}

// distinctIDs parses the row ids of a form, each once in the order first given (an id given twice
// is one row: the outcome counts rows, not fields), or returns the first value that is not a
// positive integer.
func distinctIDs(values []string) (ids []int64, bad string) {
	seen := make(map[int64]bool, len(values))
	for _, v := range values {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id < 1 {
			return nil, v
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, ""
}

func joinIDs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ", ")
}

// maxReason bounds the reason an operator types: the SQL functions take at most 1000 characters,
// and the console adds who asked (consoleReason).
const maxReason = 800

// consoleReason is the reason the SQL function logs: what the operator typed, then who asked
// through the console. outbox.operator_actions records the login role (session_user), which is
// the console's operator login for everyone; the reason keeps the person.
func consoleReason(typed string, r *http.Request) string {
	typed = strings.TrimSpace(typed)
	if typed == "" {
		return "via pgdrain web (" + who(r) + ")"
	}
	return typed + " (via pgdrain web, " + who(r) + ")"
}

// rowActionForm reads the queue, id and attempts of a skip or retry; ok is false after it answered.
func (s *Server) rowActionForm(w http.ResponseWriter, r *http.Request) (reg queueReg, back string, id int64, attempts int, ok bool) {
	reg, back, found := s.formQueue(w, r)
	if !found {
		return reg, "", 0, 0, false
	}
	id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
	if err != nil || id < 1 {
		s.message(w, r, http.StatusBadRequest, "Bad row", fmt.Sprintf("id: must be a row id, got %s", quoted(r.PostFormValue("id"))), back)
		return reg, back, 0, 0, false
	}
	// attempt_count is an integer (int4) column: a count beyond it is no row's.
	a, err := strconv.ParseInt(r.PostFormValue("attempts"), 10, 32)
	if err != nil || a < 0 {
		s.message(w, r, http.StatusBadRequest, "Bad attempt count",
			fmt.Sprintf("attempts: must be the row's attempt count as the page showed it, an integer from 0 to %d, got %s",
				math.MaxInt32, quoted(r.PostFormValue("attempts"))), back)
		return reg, back, 0, 0, false
	}
	return reg, back, id, int(a), true
}

// checkReason refuses a reason that is too long, or blank when required; ok is false after it
// answered.
func (s *Server) checkReason(w http.ResponseWriter, r *http.Request, back string, required bool) (string, bool) {
	typed := strings.TrimSpace(r.PostFormValue("reason"))
	switch {
	case required && typed == "":
		s.message(w, r, http.StatusBadRequest, "No reason", "reason: must not be blank: it is logged with the action (outbox.operator_log)", back)
		return "", false
	case utf8.RuneCountInString(typed) > maxReason:
		s.message(w, r, http.StatusBadRequest, "Reason too long",
			fmt.Sprintf("reason: at most %d characters, got %d", maxReason, utf8.RuneCountInString(typed)), back)
		return "", false
	}
	return typed, true
}

// rowAction is an action on one pending row, fenced by the attempt count the page showed: skip
// (outbox.poison_row) or retry now (outbox.retry_row).
type rowAction struct {
	path, title, button string
	reason              reasonField
	// explain says what the action will do, for the confirmation page.
	explain func(queue string, id int64, attempts int) []string
	// call runs the SQL function as the operator login and says whether it changed the row.
	call func(ctx context.Context, db *pgxpool.Pool, queue string, id int64, attempts int, reason string) (bool, error)
	// did and didNot are the status lines after it (changed, or not and why).
	did, didNot func(queue string, id int64, attempts int) string
	logKey      string // the log field that says whether it changed the row
}

var skipRow = rowAction{
	path: "/actions/skip", title: "Skip the row?", button: "Skip",
	reason: reasonField{Required: true, Hint: "why it will never succeed (logged)"},
	explain: func(queue string, id int64, attempts int) []string {
		return []string{
			fmt.Sprintf("Queue %s: skip row %d (at %d attempt(s)): it is poisoned with your reason, and the later rows of its key are delivered past it.", queue, id, attempts),
			"It is not lost: requeue it later to deliver it at the tail of its key. Only if it is still pending at that attempt count and no worker is delivering it right now (outbox.poison_row).",
		}
	},
	call: poisonRow,
	did: func(queue string, id int64, _ int) string {
		return fmt.Sprintf("skipped row %d of %s: poisoned with your reason, its key's later rows are delivered past it; requeue it to deliver it later.", id, queue)
	},
	didNot: func(queue string, id int64, attempts int) string {
		return fmt.Sprintf("row %d of %s was not skipped: it is no longer pending at %d attempt(s) (sent, requeued, skipped or another attempt recorded since the page was shown), or a worker is delivering it right now.", id, queue, attempts)
	},
	logKey: "skipped",
}

var retryRowNow = rowAction{
	path: "/actions/retry", title: "Retry the row now?", button: "Retry now",
	reason: reasonField{Hint: "optional, e.g. the peer is fixed (logged)"},
	explain: func(queue string, id int64, attempts int) []string {
		return []string{
			fmt.Sprintf("Queue %s: end the backoff of row %d (at %d attempt(s)): the next claim takes it; no attempt is counted.", queue, id, attempts),
			"Only if it is still backing off at that attempt count and no worker is delivering it right now (outbox.retry_row).",
		}
	},
	call: retryRow,
	did: func(queue string, id int64, _ int) string {
		return fmt.Sprintf("retried row %d of %s: its backoff ended, the next claim takes it (no attempt counted).", id, queue)
	},
	didNot: func(queue string, id int64, attempts int) string {
		return fmt.Sprintf("row %d of %s was not retried: it is no longer backing off at %d attempt(s) (due already, sent, skipped or another attempt recorded since the page was shown), or a worker is delivering it right now.", id, queue, attempts)
	},
	logKey: "retried",
}

// skipAction poisons a wedged head with a reason (outbox.poison_row), so its key moves on.
func (s *Server) skipAction(w http.ResponseWriter, r *http.Request) { s.rowAction(w, r, skipRow) }

// retryAction ends a backing-off head's backoff (outbox.retry_row): the next claim takes it.
func (s *Server) retryAction(w http.ResponseWriter, r *http.Request) { s.rowAction(w, r, retryRowNow) }

func (s *Server) rowAction(w http.ResponseWriter, r *http.Request, a rowAction) {
	reg, back, id, attempts, ok := s.rowActionForm(w, r)
	if !ok {
		return
	}
	queue := reg.Name
	fields := []field{{"queue", queue}, {"id", strconv.FormatInt(id, 10)}, {"attempts", strconv.Itoa(attempts)}}
	if r.PostFormValue("confirm") != "yes" {
		reason := a.reason
		s.confirm(w, r, a.title, confirmBody{
			Action: a.path, Fields: fields, Button: a.button, Back: back, Reason: &reason,
			Lines: a.explain(queue, id, attempts)})
		return
	}
	typed, ok := s.checkReason(w, r, back, a.reason.Required)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	before := s.snapshot(ctx, reg)
	changed, err := a.call(ctx, s.cfg.Operator, queue, id, attempts, consoleReason(typed, r))
	if err != nil {
		s.failed(w, r, back, err, "queue", queue, "id", id, "attempts", attempts)
		return
	}
	after := s.snapshot(ctx, reg)
	s.sampler.refresh(ctx, queue)
	o := outcome{Changed: changed, Lines: changes(before, after), Text: a.did(queue, id, attempts)}
	if !changed {
		o.Text, o.Lines = a.didNot(queue, id, attempts), nil
	}
	s.done(w, r, back, o, "queue", queue, "id", id, "attempts", attempts, "reason", typed, a.logKey, changed)
}

// dismissAction dismisses poisoned rows for good (outbox.dismiss_poisoned): kept as history,
// never delivered, no longer counted as poisoned.
func (s *Server) dismissAction(w http.ResponseWriter, r *http.Request) {
	reg, back, found := s.formQueue(w, r)
	if !found {
		return
	}
	queue := reg.Name
	ids, bad := distinctIDs(r.PostForm["id"])
	if bad != "" {
		s.message(w, r, http.StatusBadRequest, "Bad id", fmt.Sprintf("id: must be a positive integer, got %s", quoted(bad)), back)
		return
	}
	if len(ids) == 0 || len(ids) > listLimit {
		s.message(w, r, http.StatusBadRequest, "Nothing to dismiss", fmt.Sprintf("id: give between 1 and %d distinct poisoned row ids, got %d", listLimit, len(ids)), back)
		return
	}
	fields := []field{{"queue", queue}}
	for _, id := range ids {
		fields = append(fields, field{"id", strconv.FormatInt(id, 10)})
	}
	if r.PostFormValue("confirm") != "yes" {
		s.confirm(w, r, "Dismiss poisoned rows?", confirmBody{
			Action: "/actions/dismiss", Fields: fields, Button: "Dismiss", Back: back,
			Reason: &reasonField{Required: true, Hint: "why they will never be delivered (logged)"},
			Lines: []string{
				fmt.Sprintf("Queue %s: dismiss poisoned row(s) %s for good: never delivered, no longer counted or listed as poisoned.", queue, joinIDs(ids)),
				"They are kept as history (like sent rows, until purged) with your reason; rows that are not poisoned any more are left alone (outbox.dismiss_poisoned). This can not be undone from the console.",
			}})
		return
	}
	typed, ok := s.checkReason(w, r, back, true)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	before := s.snapshot(ctx, reg)
	n, err := dismissPoisoned(ctx, s.cfg.Operator, queue, ids, consoleReason(typed, r))
	if err != nil {
		s.failed(w, r, back, err, "queue", queue, "ids", ids)
		return
	}
	after := s.snapshot(ctx, reg)
	s.sampler.refresh(ctx, queue)
	o := outcome{Changed: n > 0, Lines: changes(before, after),
		Text: fmt.Sprintf("dismissed %d poisoned row(s) of %s (%s) for good: kept as history, never delivered.", n, queue, joinIDs(ids))}
	switch {
	case n == 0:
		o.Text = fmt.Sprintf("row(s) %s of %s: not poisoned any more (requeued or dismissed since the page was shown) or being delivered: nothing was dismissed.", joinIDs(ids), queue)
		o.Lines = nil
	case int(n) < len(ids):
		o.Lines = append([]string{fmt.Sprintf("%d of the %d row(s) asked for were not poisoned any more", len(ids)-int(n), len(ids))}, o.Lines...)
	}
	s.done(w, r, back, o, "queue", queue, "ids", ids, "reason", typed, "dismissed", n)
}

// acknowledgeAction acknowledges a firing alert (alr.acknowledge_alert): its ladders stop, no
// further step pages anyone, the alert stays firing until resolved.
func (s *Server) acknowledgeAction(w http.ResponseWriter, r *http.Request) {
	const back = "/escalations"
	alert := r.PostFormValue("alert")
	if !uuidText.MatchString(alert) {
		s.message(w, r, http.StatusBadRequest, "Bad alert", fmt.Sprintf("alert: must be an alert id (uuid), got %s", quoted(alert)), back)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	if r.PostFormValue("confirm") != "yes" {
		name, state, err := readAlert(ctx, s.cfg.Reader, alert)
		if err != nil {
			s.alertFailed(w, r, back, alert, err)
			return
		}
		s.confirm(w, r, "Acknowledge the alert?", confirmBody{
			Action: "/actions/acknowledge", Fields: []field{{"alert", alert}}, Button: "Acknowledge", Back: back,
			Reason: &reasonField{Hint: "optional note, e.g. looking into it (logged with the acknowledgement)"},
			Lines: []string{
				fmt.Sprintf("Acknowledge alert %s (%s, now %s): you are on it.", quoted(name), alert, state),
				"Its running ladders stop at once: no further step pages anyone, and a step an engine already took is not delivered. The alert stays firing until it is resolved (alr.acknowledge_alert).",
			}})
		return
	}
	typed, ok := s.checkReason(w, r, back, false)
	if !ok {
		return
	}
	name, _, runningBefore, err := alertState(ctx, s.cfg.Operator, alert)
	if err != nil {
		s.alertFailed(w, r, back, alert, err)
		return
	}
	acked, err := acknowledgeAlert(ctx, s.cfg.Operator, alert, consoleReason(typed, r))
	if err != nil {
		s.failed(w, r, back, err, "alert", alert)
		return
	}
	_, stateAfter, runningAfter, err := alertState(ctx, s.cfg.Operator, alert)
	if err != nil {
		s.failed(w, r, back, err, "alert", alert)
		return
	}
	o := outcome{Changed: acked,
		Text: fmt.Sprintf("acknowledged alert %s (%s): its ladders are stopped, no further step is delivered; it stays firing until resolved.", quoted(name), alert)}
	if runningBefore != runningAfter {
		o.Lines = append(o.Lines, fmt.Sprintf("running ladders %d → %d", runningBefore, runningAfter))
	}
	if !acked {
		o.Text = fmt.Sprintf("alert %s (%s) was already acknowledged: nothing changed, the first acknowledgement is kept.", quoted(name), alert)
		if stateAfter != "firing" {
			o.Text = fmt.Sprintf("alert %s (%s) is %s: nothing was acknowledged.", quoted(name), alert, stateAfter)
		}
		o.Lines = nil
	}
	s.done(w, r, back, o, "alert", alert, "note", typed, "acknowledged", acked, "running_ladders_stopped", runningBefore-runningAfter)
}

// maxKeyFence is how many ids of a key the requeue confirmation carries (about 20 characters
// each: within the form's size limit); a key with more is requeued as it is at the click.
const maxKeyFence = 1000

// onlyNamed returns the ids of found that named lists, and how many of found it does not.
func onlyNamed(found, named []int64) (kept []int64, left int) {
	in := make(map[int64]bool, len(named))
	for _, id := range named {
		in[id] = true
	}
	for _, id := range found {
		if in[id] {
			kept = append(kept, id)
		} else {
			left++
		}
	}
	return kept, left
}

// joinIDsComma writes ids as "1,2,3".
func joinIDsComma(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ",")
}
