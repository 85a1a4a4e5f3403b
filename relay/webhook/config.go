package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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
	// (Content-Length, Host, Connection, ...). Defaults to none.
	Headers map[string]string `yaml:"headers"`
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
	for name := range c.Headers {
		switch canon := http.CanonicalHeaderKey(name); {
		case reserved(canon):
			bad("Headers may not set %s: the sink or HTTP sets it", name)
		case name == "" || strings.ContainsAny(name, " \t\r\n:"):
			bad("Headers has an invalid header name %q", name)
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

// redact hides a password in a URL for error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
