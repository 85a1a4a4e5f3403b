package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgdrain/pgdrain/relay"
)

// DefaultName is the connection name the sink announces.
const DefaultName = "pgdrain-relay"

// Config configures a JetStream Sink.
type Config struct {
	// URL is the server URL (nats://host:4222), or several separated by commas. Required.
	URL string `yaml:"url"`
	// Subject receives every event. Set it or SubjectField.
	Subject string `yaml:"subject"`
	// SubjectField names the payload's top-level string field that holds each event's subject.
	// Set it or Subject.
	SubjectField string `yaml:"subject_field"`
	// AllowedSubjects limits the subjects SubjectField may name, as NATS subject patterns
	// ("orders.>", "invoices.*.created"): a payload naming any other subject is refused for good
	// (its row poisons under the queue's default policy) and nothing is published, so a producer
	// cannot make the relay publish where its credentials reach but the producer should not. A
	// system subject, whose first token starts with "$" ($JS, $KV, $O, $SYS: the server's and
	// JetStream's API) or is "_INBOX" (replies to requests), is refused whatever the patterns say,
	// unless a pattern names that first token literally ("$KV.settings.>"): a wildcard never
	// matches it. SubjectField only. Defaults to every subject but the system ones.
	AllowedSubjects []string `yaml:"allowed_subjects"`
	// CredentialsFile is a NATS user credentials file (.creds). Defaults to none.
	CredentialsFile string `yaml:"credentials_file"`
	// Name is the connection's name. Defaults to "pgdrain-relay" (DefaultName).
	Name string `yaml:"name"`
	// Options are more nats.go options (TLS, tokens), after the sink's own.
	Options []nats.Option `yaml:"-"`
}

// Validate reports every problem of c, one line each, each starting with the field name.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if strings.TrimSpace(c.URL) == "" {
		bad("URL must be set to the NATS server (nats://host:4222)")
	}
	switch {
	case c.Subject == "" && c.SubjectField == "":
		bad("Subject must be set, or SubjectField to take each event's subject from its payload")
	case c.Subject != "" && c.SubjectField != "":
		bad("Subject must be empty when SubjectField is set: the subject comes from one place")
	case c.Subject != "":
		if err := checkSubject(c.Subject); err != nil {
			bad("Subject %v", err)
		}
	}
	if len(c.AllowedSubjects) > 0 && c.SubjectField == "" {
		bad("AllowedSubjects must be empty unless SubjectField is set: they limit the subjects payloads name")
	}
	for i, p := range c.AllowedSubjects {
		if err := checkPattern(p); err != nil {
			bad("AllowedSubjects[%d] %v", i, err)
		}
	}
	return errors.Join(errs...)
}

// checkPattern refuses what is not a subject pattern: empty tokens, whitespace, a ">" that is not
// the last token, a token mixing a wildcard with other characters.
func checkPattern(p string) error {
	toks := strings.Split(p, ".")
	for i, tok := range toks {
		switch {
		case tok == "":
			return fmt.Errorf("must be dot-separated non-empty tokens, got %q", p)
		case strings.ContainsAny(tok, " \t\r\n"):
			return fmt.Errorf("must not hold whitespace, got %q", p)
		case tok == ">" && i != len(toks)-1:
			return fmt.Errorf("may hold \">\" only as its last token, got %q", p)
		case tok != "*" && tok != ">" && strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("must hold a wildcard as a whole token (\"a.*.c\", \"a.>\"), got %q", p)
		}
	}
	return nil
}

// systemToken reports whether a subject's first token belongs to the server: "$JS", "$KV", "$O",
// "$SYS" and every other "$" name are the server's and JetStream's API, "_INBOX" carries replies to
// requests.
func systemToken(tok string) bool {
	return strings.HasPrefix(tok, "$") || tok == "_INBOX"
}

// allowed reports whether subject (a valid one, without wildcards) is one the config lets a
// payload name: it matches one of patterns (every non-system subject when there are none), and a
// system subject only a pattern that names its first token literally.
func allowed(subject string, patterns []string) bool {
	subj := strings.Split(subject, ".")
	if len(patterns) == 0 {
		return !systemToken(subj[0])
	}
	for _, p := range patterns {
		if matches(strings.Split(p, "."), subj) {
			return true
		}
	}
	return false
}

// matches is NATS subject matching ("*" one token, ">" one or more to the end), except that a
// system first token is matched only literally.
func matches(pattern, subj []string) bool {
	if systemToken(subj[0]) && pattern[0] != subj[0] {
		return false
	}
	for i, tok := range pattern {
		switch {
		case tok == ">":
			return len(subj) > i
		case i >= len(subj):
			return false
		case tok != "*" && tok != subj[i]:
			return false
		}
	}
	return len(pattern) == len(subj)
}

// checkSubject refuses what a publisher may not send to: empty tokens, whitespace, wildcards.
func checkSubject(s string) error {
	for _, tok := range strings.Split(s, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("must be dot-separated non-empty tokens, got %q", s)
		case tok == "*" || tok == ">":
			return fmt.Errorf("must not hold a wildcard to publish to, got %q", s)
		case strings.ContainsAny(tok, " \t\r\n"):
			return fmt.Errorf("must not hold whitespace, got %q", s)
		}
	}
	return nil
}

// Sink publishes events to JetStream. It is safe for concurrent use.
type Sink struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
}

var _ relay.Sink = (*Sink)(nil)

// New connects to cfg.URL (retrying in the background when no server answers yet). When the server
// answers at once, New also makes sure that a stream captures cfg.Subject, if set.
func New(cfg Config) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := []nats.Option{
		nats.Name(cmpOr(cfg.Name, DefaultName)),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
	}
	if cfg.CredentialsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredentialsFile))
	}
	nc, err := nats.Connect(cfg.URL, append(opts, cfg.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	s := &Sink{cfg: cfg, nc: nc, js: js}
	// The one configured subject is checked at start when the server answers (a server that is
	// down is retried in the background instead): no stream capturing it is a setup mistake that
	// would otherwise only show as events waiting.
	if cfg.Subject != "" && nc.IsConnected() && s.noStream(context.Background(), cfg.Subject) {
		nc.Close()
		return nil, fmt.Errorf("no JetStream stream captures Subject %q: add it to a stream first", cfg.Subject)
	}
	return s, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Deliver publishes every event at once and waits for each acknowledgement.
func (s *Sink) Deliver(ctx context.Context, events []relay.Event) []relay.Result {
	out := make([]relay.Result, len(events))
	var wg sync.WaitGroup
	for i, e := range events {
		wg.Go(func() { out[i] = s.publish(ctx, e) })
	}
	wg.Wait()
	return out
}

func (s *Sink) publish(ctx context.Context, e relay.Event) relay.Result {
	subject, err := s.subject(e)
	if err != nil {
		return relay.PermanentResult(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = e.Payload
	msg.Header.Set("Event-Type", e.Type)
	msg.Header.Set("Event-Source", "/pgdrain/"+e.Queue)
	msg.Header.Set("Event-Time", e.CreatedAt.UTC().Format(time.RFC3339Nano))
	msg.Header.Set("Content-Type", "application/json")
	setEventHeaders(msg.Header, e.Headers)
	// WithMsgID sets Nats-Msg-Id: the stream keeps one message per id within its duplicate window.
	if _, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID(e.Identity)); err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) && s.noStream(ctx, subject) {
			return s.noStreamResult(subject)
		}
		err = fmt.Errorf("publishing to %s: %w", subject, err)
		if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrBadHeaderMsg) {
			return relay.PermanentResult(err)
		}
		return relay.TransientResult(err)
	}
	return relay.SentResult()
}

// streamLookupTimeout bounds the question "which stream captures this subject?" asked after a
// publish nobody answered: credentials that may not call JetStream's API make it time out.
const streamLookupTimeout = 2 * time.Second

// noStream reports whether JetStream says that no stream captures subject. A publish that no
// stream answers ("no response from stream", after nats.go's own retries for a leader election)
// is asked about once more: only a definite "stream not found" counts, any other answer (no
// JetStream, no permission for the API, a timeout) leaves the publish transient.
func (s *Sink) noStream(ctx context.Context, subject string) bool {
	ctx, cancel := context.WithTimeout(ctx, streamLookupTimeout)
	defer cancel()
	_, err := s.js.StreamNameBySubject(ctx, subject)
	return errors.Is(err, jetstream.ErrStreamNotFound)
}

// noStreamResult is the Result of a publish to a subject no stream captures. A subject taken from
// the payload is the event's: no stream will ever store it unless an operator adds one, so the
// event is refused for good (and can be requeued once a stream captures it). The one configured
// Subject is the relay's: a stream missing for it is a server not set up yet, so its events wait
// (transient), as they do for a server that is down; New refuses it when the server answers at
// start.
func (s *Sink) noStreamResult(subject string) relay.Result {
	if s.cfg.SubjectField != "" {
		return relay.PermanentResult(fmt.Errorf("publishing to %s: no JetStream stream captures the subject, so the server "+
			"would never store the event (add the subject to a stream, then requeue the event)", subject))
	}
	return relay.TransientResult(fmt.Errorf("publishing to %s: no JetStream stream captures the subject: add it to a "+
		"stream; the events wait until one does", subject))
}

// ownHeaders are the headers the sink sets on every message; an event's headers do not replace
// them.
var ownHeaders = []string{"event-type", "event-source", "event-time", "content-type"}

// setEventHeaders adds the event's headers to h, except the sink's own and every Nats-* header:
// JetStream reads those (Nats-Msg-Id is the identity, Nats-Expected-* would make publishes fail,
// Nats-Rollup would purge the subject), so a producer may not steer the stream through them. NATS
// header names are case-sensitive; the names are compared without case all the same.
func setEventHeaders(h nats.Header, headers map[string]string) {
	for name, value := range headers {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "nats-") || slices.Contains(ownHeaders, lower) {
			continue
		}
		h.Set(name, value)
	}
}

func (s *Sink) subject(e relay.Event) (string, error) {
	if s.cfg.SubjectField == "" {
		return s.cfg.Subject, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(e.Payload, &fields); err != nil {
		return "", fmt.Errorf("reading subject field %q: the payload is not a JSON object", s.cfg.SubjectField)
	}
	var subject string
	raw, ok := fields[s.cfg.SubjectField]
	if !ok || json.Unmarshal(raw, &subject) != nil {
		return "", fmt.Errorf("the payload has no string field %q to take the subject from", s.cfg.SubjectField)
	}
	if err := checkSubject(subject); err != nil {
		return "", fmt.Errorf("the payload's field %q %w", s.cfg.SubjectField, err)
	}
	if !allowed(subject, s.cfg.AllowedSubjects) {
		if len(s.cfg.AllowedSubjects) == 0 {
			return "", fmt.Errorf("the payload's field %q names the system subject %q (the server's or JetStream's API, "+
				"or a request's reply): the relay never publishes there for a producer unless allowed_subjects names it",
				s.cfg.SubjectField, subject)
		}
		return "", fmt.Errorf("the payload's field %q names the subject %q, which allowed_subjects (%s) does not allow",
			s.cfg.SubjectField, subject, strings.Join(s.cfg.AllowedSubjects, ", "))
	}
	return subject, nil
}

// Close closes the connection. Every publish was acknowledged (or given up) before its Deliver
// returned, so nothing is left to flush.
func (s *Sink) Close() error {
	s.nc.Close()
	return nil
}
