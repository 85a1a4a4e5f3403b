package webhook

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// transportHeaders are the headers HTTP itself controls: an event's headers never set them (a
// producer's "Connection: close" or "Content-Length" would break the request, not describe it).
var transportHeaders = []string{"Content-Length", "Host", "Transfer-Encoding", "Connection", "Trailer", "Te",
	"Upgrade", "Keep-Alive", "Proxy-Connection"}

// reserved reports whether the sink sets the header itself (Content-Type, webhook-*) or HTTP
// does; an event's headers are not sent under these names.
func reserved(name string) bool {
	canon := http.CanonicalHeaderKey(name)
	return canon == "Content-Type" || strings.HasPrefix(canon, "Webhook-") || slices.Contains(transportHeaders, canon)
}

// setEventHeaders copies the event's headers into h, leaving out the reserved ones. An event
// header HTTP cannot carry (a name that is not a token, a value with a control character) is an
// error: the request would fail the same way on every attempt, so the event is refused for good
// rather than retried for ever.
func setEventHeaders(h http.Header, headers map[string]string) error {
	for name, value := range headers {
		if reserved(name) {
			continue
		}
		if !validName(name) {
			return fmt.Errorf("the event's header name %q is not an HTTP token", name)
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
