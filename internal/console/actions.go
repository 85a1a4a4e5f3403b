package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgdrain/pgdrain/internal/age"
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
}

func (s *Server) confirm(w http.ResponseWriter, r *http.Request, title string, b confirmBody) {
	b.Fields = append(b.Fields, field{"confirm", "yes"})
	nav := "queues"
	if b.Back == "/escalations" {
		nav = "escalations"
	}
	s.render(w, r, http.StatusOK, "confirm", pageData{Title: title, Nav: nav, Body: b})
}

// done logs the action with who asked and what it changed, leaves the result for the next page
// and redirects there.
func (s *Server) done(w http.ResponseWriter, r *http.Request, back, msg string, attrs ...any) {
	s.cfg.Logger.Info("console action", append([]any{"who", who(r), "remote", r.RemoteAddr, "action", r.URL.Path}, attrs...)...)
	s.setFlash(w, r, msg)
	http.Redirect(w, r, back, http.StatusSeeOther)
}

func (s *Server) failed(w http.ResponseWriter, r *http.Request, back string, err error, attrs ...any) {
	s.failedNote(w, r, back, err, "", attrs...)
}

// failedNote is failed with a sentence after the error saying what to do about it.
func (s *Server) failedNote(w http.ResponseWriter, r *http.Request, back string, err error, note string, attrs ...any) {
	s.cfg.Logger.Warn("console action failed", append([]any{"who", who(r), "remote", r.RemoteAddr, "action", r.URL.Path, "err", err}, attrs...)...)
	status := http.StatusInternalServerError
	if st := sqlState(err); st == "42P01" || st == "22023" || st == "P0002" {
		status = http.StatusBadRequest
	}
	text := describe(err)
	if note != "" {
		text += " " + note
	}
	s.message(w, r, status, "Action failed", text, back)
}

func (s *Server) requeueAction(w http.ResponseWriter, r *http.Request) {
	queue := r.PostFormValue("queue")
	_, reg, ok := s.sampler.view(queue)
	if !ok {
		s.message(w, r, http.StatusBadRequest, "No such queue", fmt.Sprintf("queue: no queue named %q is registered", queue), "/")
		return
	}
	back := "/queues/" + url.PathEscape(queue)
	ids, key, all := r.PostForm["id"], r.PostFormValue("key"), r.PostFormValue("all") == "yes"
	given := 0
	for _, b := range []bool{len(ids) > 0, key != "", all} {
		if b {
			given++
		}
	}
	if given != 1 {
		s.message(w, r, http.StatusBadRequest, "Nothing to requeue", "requeue: give one of id, key or all=yes", back)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	var list []int64
	var what string
	switch {
	case all:
		what = "every poisoned row of " + queue
	case key != "":
		// Through the operator's login, the one that acts: docs/security.md grants it the columns
		// this reads; the reader's login needs nothing of the queue table.
		found, err := poisonedIDsOfKey(ctx, s.cfg.Operator, reg, key)
		if err != nil {
			note := ""
			if sqlState(err) == "42501" && reg.PartitionColumn != nil {
				note = fmt.Sprintf("Requeueing all of a key reads its poisoned ids through the operator's login (--operator-dsn): GRANT SELECT (id, %s, attempt_count, sent_at) ON %s TO that login.",
					quoteIdent(*reg.PartitionColumn), reg.Table)
			}
			s.failedNote(w, r, back, err, note, "queue", queue, "key", key)
			return
		}
		if len(found) == 0 {
			s.message(w, r, http.StatusBadRequest, "Nothing to requeue", fmt.Sprintf("key: %q has no poisoned row in %s", key, queue), back)
			return
		}
		list, what = found, fmt.Sprintf("the %d poisoned row(s) of key %q", len(found), key)
	default:
		for _, v := range ids {
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil || id < 1 {
				s.message(w, r, http.StatusBadRequest, "Bad id", fmt.Sprintf("id: must be a positive integer, got %q", v), back)
				return
			}
			list = append(list, id)
		}
		what = "poisoned row(s) " + joinIDs(list)
	}
	if r.PostFormValue("confirm") != "yes" {
		fields := []field{{"queue", queue}}
		switch {
		case all:
			fields = append(fields, field{"all", "yes"})
		case key != "":
			fields = append(fields, field{"key", key})
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
	n, err := requeuePoisoned(ctx, s.cfg.Operator, queue, list)
	if err != nil {
		s.failed(w, r, back, err, "queue", queue, "ids", list, "key", key, "all", all)
		return
	}
	s.done(w, r, back, fmt.Sprintf("requeued %d poisoned row(s) of %s", n, queue),
		"queue", queue, "ids", list, "key", key, "all", all, "requeued", n)
}

func (s *Server) purgeAction(w http.ResponseWriter, r *http.Request) {
	queue := r.PostFormValue("queue")
	if _, _, ok := s.sampler.view(queue); !ok {
		s.message(w, r, http.StatusBadRequest, "No such queue", fmt.Sprintf("queue: no queue named %q is registered", queue), "/")
		return
	}
	back := "/queues/" + url.PathEscape(queue)
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
	n, err := purgeSent(ctx, s.cfg.Operator, queue, olderThan)
	if err != nil {
		s.failed(w, r, back, err, "queue", queue, "older_than", olderThan.String(), "deleted", n)
		return
	}
	msg := fmt.Sprintf("deleted %d sent row(s) of %s older than %s", n, queue, human(olderThan))
	if n >= purgeMaxRows {
		msg += " (the most one click deletes; purge again for more)"
	}
	s.done(w, r, back, msg, "queue", queue, "older_than", olderThan.String(), "deleted", n)
}

func (s *Server) releaseAction(w http.ResponseWriter, r *http.Request) {
	queue := r.PostFormValue("queue")
	if _, _, ok := s.sampler.view(queue); !ok {
		s.message(w, r, http.StatusBadRequest, "No such queue", fmt.Sprintf("queue: no queue named %q is registered", queue), "/")
		return
	}
	back := "/queues/" + url.PathEscape(queue)
	id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
	if err != nil {
		s.message(w, r, http.StatusBadRequest, "Bad row", fmt.Sprintf("id: must be a row id, got %q", r.PostFormValue("id")), back)
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		s.confirm(w, r, "End the lease?", confirmBody{
			Action: "/actions/release", Fields: []field{{"queue", queue}, {"id", strconv.FormatInt(id, 10)}}, Button: "Release", Back: back,
			Lines: []string{
				fmt.Sprintf("Queue %s: end the lease of row %d now; it is claimable at once, no attempt counted.", queue, id),
				"The worker holding it can no longer record a result for it: its lease token no longer matches (outbox.release_lease).",
			}})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	released, err := releaseLease(ctx, s.cfg.Operator, queue, id)
	if err != nil {
		s.failed(w, r, back, err, "queue", queue, "id", id)
		return
	}
	msg := fmt.Sprintf("released the lease of row %d of %s", id, queue)
	if !released {
		msg = fmt.Sprintf("row %d of %s was not leased any more: nothing changed", id, queue)
	}
	s.done(w, r, back, msg, "queue", queue, "id", id, "released", released)
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

var uuidText = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func (s *Server) resolveAction(w http.ResponseWriter, r *http.Request) {
	const back = "/escalations"
	alert := r.PostFormValue("alert")
	if !uuidText.MatchString(alert) {
		s.message(w, r, http.StatusBadRequest, "Bad alert", fmt.Sprintf("alert: must be an alert id (uuid), got %q", alert), back)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	if r.PostFormValue("confirm") != "yes" {
		name, state, err := readAlert(ctx, s.cfg.Reader, alert)
		if err != nil {
			s.failed(w, r, back, err, "alert", alert)
			return
		}
		s.confirm(w, r, "Resolve the alert?", confirmBody{
			Action: "/actions/resolve", Fields: []field{{"alert", alert}}, Button: "Resolve", Back: back,
			Lines: []string{
				fmt.Sprintf("Resolve alert %q (%s, now %s).", name, alert, state),
				"Its running ladders stop at once; a step already taken by an engine is not delivered (alr.resolve_alert).",
			}})
		return
	}
	if err := resolveAlert(ctx, s.cfg.Operator, alert); err != nil {
		s.failed(w, r, back, err, "alert", alert)
		return
	}
	s.done(w, r, back, "resolved alert "+alert, "alert", alert)
}

func joinIDs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ", ")
}
