package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Body formats of Config.Body.
const (
	// BodyEnvelope (the default) sends the Standard Webhooks payload structure:
	// {"type": event_type, "timestamp": created_at (RFC 3339), "data": payload}.
	BodyEnvelope = "envelope"
	// BodyPayload sends the row's payload as it is.
	BodyPayload = "payload"
)

// The key length the Standard Webhooks specification asks for.
const (
	minKeyBytes = 24
	maxKeyBytes = 64
)

// SecretPrefix starts every signing secret: "whsec_" followed by the base64 of the key.
const SecretPrefix = "whsec_"

// Config configures a webhook Sink.
type Config struct {
	// URL is the endpoint every event is POSTed to (http or https). Required.
	URL string `yaml:"url"`
	// Secrets are the signing secrets, "whsec_<base64>". Every secret signs every request (one
	// signature each in webhook-signature), so a rotation lists the old and the new secret until
	// receivers have switched. At least one is required.
	Secrets []string `yaml:"secrets"`
	// Headers are sent with every request (an API key, a tenant), over any event header of the
	// same name. They may not set Content-Type, the webhook-* headers or those HTTP controls
	// (Content-Length, Host, Connection, Expect, ...), in any case, "_" read as "-". Defaults to
	// none.
	Headers map[string]string `yaml:"headers"`
	// EventHeaders are the headers a producer may send with its events (the row's headers): names,
	// or prefixes ending in "*" ("x-acme-*"), compared without case and with "_" read as "-"; the
	// event's other headers are left out. A prefix never matches a credential or a header proxies
	// and frameworks trust (Authorization, Proxy-Authorization, Cookie, Forwarded, X-Forwarded-*,
	// X-Real-IP, X-HTTP-Method-Override, ...): list such a name exactly to let producers set it.
	// Content-Type, webhook-* and the headers HTTP controls are never an event's. An empty list
	// sends none. Defaults to x-*, traceparent, tracestate and baggage (DefaultEventHeaders).
	EventHeaders []string `yaml:"event_headers"`
	// Body is BodyEnvelope or BodyPayload. Defaults to BodyEnvelope.
	Body string `yaml:"body"`
	// Client sends the requests; it must not follow redirects (New's default client does not).
	// Each request ends with its event's delivery deadline. Defaults to a client with Go's
	// default transport that returns redirects as answers.
	Client *http.Client `yaml:"-"`
}

// Validate reports every problem of c, one line each, each starting with the field name.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.URL == "" {
		bad("URL must be set to the endpoint (http:// or https://)")
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("URL must be an absolute http:// or https:// URL, got %q", redact(c.URL))
	}
	if len(c.Secrets) == 0 {
		bad("Secrets must list at least one signing secret (%s<base64>)", SecretPrefix)
	}
	for i, s := range c.Secrets {
		if _, err := decodeSecret(s); err != nil {
			bad("Secrets[%d] %v", i, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Headers)) {
		switch {
		case !validName(name):
			bad("Headers has an invalid header name %q", name)
		case reserved(name):
			bad("Headers may not set %s: the sink or HTTP sets it", name)
		case !validValue(c.Headers[name]):
			bad("Headers has a value with a control character for %s", name)
		}
	}
	for i, e := range c.EventHeaders {
		name, wildcard := strings.CutSuffix(e, "*")
		switch {
		case name == "" && wildcard:
		case !validName(name) || strings.Contains(name, "*"):
			bad("EventHeaders[%d] must be a header name, or a prefix ending in \"*\", got %q", i, e)
		case reserved(name):
			bad("EventHeaders[%d] may not let events set %s: the sink or HTTP sets it", i, e)
		}
	}
	switch c.Body {
	case "", BodyEnvelope, BodyPayload:
	default:
		bad("Body must be %q or %q, got %q", BodyEnvelope, BodyPayload, c.Body)
	}
	return errors.Join(errs...)
}

// decodeSecret returns the key of a "whsec_<base64>" secret.
func decodeSecret(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("must start with %q", SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("must be %s followed by base64: %v", SecretPrefix, err)
	}
	if len(key) < minKeyBytes || len(key) > maxKeyBytes {
		return nil, fmt.Errorf("must hold a key of %d to %d bytes, as the specification asks, got %d", minKeyBytes, maxKeyBytes, len(key))
	}
	return key, nil
}

// redact hides a password in a URL for error messages; a URL that does not parse is shown as it
// is, but for what may be a password (whatever lies between the scheme's "://" and the last "@"
// before the path, after its first ":").
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authority, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return raw
	}
	user, _, hasPassword := strings.Cut(authority[:at], ":")
	if !hasPassword {
		return raw
	}
	return scheme + "://" + user + ":xxxxx" + authority[at:] + path
}
