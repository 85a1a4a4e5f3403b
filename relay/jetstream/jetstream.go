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
	return errors.Join(errs...)
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

// New connects to cfg.URL (retrying in the background when no server answers yet).
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
	return &Sink{cfg: cfg, nc: nc, js: js}, nil
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
		err = fmt.Errorf("publishing to %s: %w", subject, err)
		if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrBadHeaderMsg) {
			return relay.PermanentResult(err)
		}
		return relay.TransientResult(err)
	}
	return relay.SentResult()
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
	return subject, nil
}

// Close closes the connection. Every publish was acknowledged (or given up) before its Deliver
// returned, so nothing is left to flush.
func (s *Sink) Close() error {
	s.nc.Close()
	return nil
}
