package webhook

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// DefaultEventHeaders is what Config.EventHeaders defaults to: a producer may send its own x-*
// headers (a tenant, a correlation id) and the W3C trace context, nothing else.
var DefaultEventHeaders = []string{"x-*", "traceparent", "tracestate", "baggage"}

// transportHeaders are the headers HTTP itself controls (folded, see fold): neither an event nor
// Config.Headers sets them (a producer's "Connection: close", "Content-Length" or "Expect:
// 100-continue" would change the request, not describe it).
var transportHeaders = []string{"content-length", "host", "transfer-encoding", "connection", "trailer", "te",
	"upgrade", "keep-alive", "proxy-connection", "expect"}

// sensitiveHeaders are credentials and what proxies and frameworks trust about a request (its
// client address, its method, its path): a prefix of Config.EventHeaders never matches them, only
// the exact name does. A name ending in "-" stands for every name it starts.
var sensitiveHeaders = []string{"authorization", "proxy-authorization", "cookie", "forwarded", "x-forwarded-",
	"x-real-ip", "x-client-ip", "x-http-method-override", "x-http-method", "x-method-override", "x-original-url",
	"x-rewrite-url"}

// fold is the form header names are compared in: lower case, with "_" read as "-" (many servers
// and CGI-style frameworks treat Webhook_Signature as webhook-signature).
func fold(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "_", "-"))
}

// reserved reports whether the sink sets the header itself (Content-Type, webhook-*) or HTTP
// does: nobody else sets these names, in any case or spelling.
func reserved(name string) bool {
	f := fold(name)
	return f == "content-type" || strings.HasPrefix(f, "webhook-") || slices.Contains(transportHeaders, f)
}

// sensitive reports whether name is one of sensitiveHeaders.
func sensitive(name string) bool {
	f := fold(name)
	return slices.ContainsFunc(sensitiveHeaders, func(s string) bool {
		if strings.HasSuffix(s, "-") {
			return strings.HasPrefix(f, s)
		}
		return f == s
	})
}

// headerPolicy is Config.EventHeaders, folded: exact names and prefixes (an entry "x-*" is the
// prefix "x-", "*" every name).
type headerPolicy struct {
	names    []string
	prefixes []string
}

func newHeaderPolicy(entries []string) headerPolicy {
	var p headerPolicy
	for _, e := range entries {
		if prefix, ok := strings.CutSuffix(fold(e), "*"); ok {
			p.prefixes = append(p.prefixes, prefix)
		} else {
			p.names = append(p.names, fold(e))
		}
	}
	return p
}

// allows reports whether an event may send header name: never a reserved one; a sensitive one only
// when named exactly; any other when named or matched by a prefix.
func (p headerPolicy) allows(name string) bool {
	if reserved(name) {
		return false
	}
	f := fold(name)
	if slices.Contains(p.names, f) {
		return true
	}
	if sensitive(name) {
		return false
	}
	return slices.ContainsFunc(p.prefixes, func(prefix string) bool { return strings.HasPrefix(f, prefix) })
}

// setEventHeaders copies the event's headers that policy allows into h; the others are left out.
// An allowed event header HTTP cannot carry (a name that is not a token, a value with a control
// character) is an error: the request would fail the same way on every attempt, so the event is
// refused for good rather than retried for ever.
func setEventHeaders(h http.Header, headers map[string]string, policy headerPolicy) error {
	for name, value := range headers {
		if !validName(name) {
			return fmt.Errorf("the event's header name %q is not an HTTP token", name)
		}
		if !policy.allows(name) {
			continue
		}
		if !validValue(value) {
			return fmt.Errorf("the event's header %s has a value with a control character", name)
		}
		h.Set(name, value)
	}
	return nil
}

// validName: an RFC 9110 token.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 0x80 || !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validValue: no control characters other than horizontal tab (what net/http refuses to send).
func validValue(value string) bool {
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
