package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Sign returns the webhook-signature value for a message: "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>" for each secret ("whsec_<base64>"), separated by spaces.
func Sign(secrets []string, id string, timestamp int64, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for i, s := range secrets {
		key, err := decodeSecret(s)
		if err != nil {
			return "", fmt.Errorf("secret %d %w", i, err)
		}
		sigs = append(sigs, "v1,"+signature(key, id, timestamp, body))
	}
	return strings.Join(sigs, " "), nil
}

func signature(key []byte, id string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// DefaultTolerance is how far a webhook-timestamp may be from the receiver's clock in Verify, as
// the specification suggests.
const DefaultTolerance = 5 * time.Minute

// Errors of Verify.
var (
	ErrMissingHeaders   = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp        = errors.New("webhook: timestamp outside the tolerance")
	ErrNoMatchingSigner = errors.New("webhook: no signature matches a secret")
)

// Verify checks a received webhook as a receiver should: its timestamp is within tolerance of
// now, and one of its v1 signatures matches one of secrets (compared in constant time).
func Verify(secrets []string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not Unix seconds", ErrTimestamp, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s off", ErrTimestamp, d)
	}
	for _, s := range secrets {
		key, err := decodeSecret(s)
		if err != nil {
			return fmt.Errorf("webhook: secret %w", err)
		}
		want := []byte(signature(key, id, sec, body))
		for _, got := range strings.Fields(sigs) {
			version, sig, ok := strings.Cut(got, ",")
			if ok && version == "v1" && hmac.Equal([]byte(sig), want) {
				return nil
			}
		}
	}
	return ErrNoMatchingSigner
}
