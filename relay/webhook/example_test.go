package webhook_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/pgdrain/pgdrain/relay/webhook"
)

// A receiver checks a request the relay sent: one of the signatures must match one of its
// secrets, and the timestamp must be recent.
func ExampleVerify() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"type":"order.created","timestamp":"2026-11-30T12:00:00Z","data":{"order":42}}`)
	sent := time.Unix(1764504000, 0)
	sig, _ := webhook.Sign([]string{secret}, "2a7c5e04-9d1b-4f6e-8a3c-1b2d3e4f5a6b", sent.Unix(), body)

	h := http.Header{}
	h.Set("webhook-id", "2a7c5e04-9d1b-4f6e-8a3c-1b2d3e4f5a6b")
	h.Set("webhook-timestamp", fmt.Sprint(sent.Unix()))
	h.Set("webhook-signature", sig)
	fmt.Println(webhook.Verify([]string{secret}, h, body, sent.Add(time.Second), webhook.DefaultTolerance))
	fmt.Println(webhook.Verify([]string{secret}, h, []byte(`{"forged":true}`), sent, webhook.DefaultTolerance))
	// Output:
	// <nil>
	// webhook: no signature matches a secret
}
