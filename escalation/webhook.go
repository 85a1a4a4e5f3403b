package escalation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgdrain/pgdrain/internal/errtext"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

// WebhookNotifier delivers a step as an HTTP POST of a JSON WebhookPayload, with an
// Idempotency-Key header (Step.IdempotencyKey) so the receiver can drop a repeat. With Secrets it
// signs every request as Standard Webhooks describes, as the relay's webhook sink does (package
// relay/webhook: webhook-id is the step's idempotency key, webhook-timestamp the time of the
// request, webhook-signature one v1 signature per secret), so a receiver verifies it with
// webhook.Verify or any Standard Webhooks library.
type WebhookNotifier struct {
	// URL receives the POST. Empty: the step's target is the URL.
	URL string
	// Secrets are the signing secrets, "whsec_<base64>" (webhook.SecretPrefix); every secret signs
	// every request, so a rotation lists the old and the new secret. Empty: the request is not
	// signed.
	Secrets []string
	// Headers are sent with every request (an API key, a tenant). The notifier's own headers
	// (Content-Type, Idempotency-Key, webhook-*) are set over them.
	Headers map[string]string
	// Client sends the request. Defaults to a client that follows no redirect. Whatever the client,
	// a redirect is a failed delivery (followed, a 301 or 303 turned the POST into a GET without
	// its body that a 200 counted as delivered; a 307 is not followed at all, the request keeping no
	// body to send again), and a request is sent once: Go's transport silently sends again a
	// request with an Idempotency-Key header whose connection dropped before the answer, which the
	// notifier prevents (a step is delivered at most once). The engine's StepTimeout still bounds
	// every call through the context.
	Client *http.Client
}

// noRedirects is the default client of WebhookNotifier.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// WebhookPayload is the JSON body a WebhookNotifier posts.
type WebhookPayload struct {
	// IdempotencyKey repeats the Idempotency-Key header.
	IdempotencyKey string `json:"idempotency_key"`
	// Alert is the escalating alert.
	Alert WebhookAlert `json:"alert"`
	// Step is the step being delivered.
	Step WebhookStep `json:"step"`
}

// WebhookAlert is the alert part of a WebhookPayload.
type WebhookAlert struct {
	// ID is the alert's id.
	ID string `json:"id"`
	// Name is the alert's name.
	Name string `json:"name"`
}

// WebhookStep is the step part of a WebhookPayload.
type WebhookStep struct {
	// EscalationID is the ladder's id.
	EscalationID string `json:"escalation_id"`
	// Index is the step's index in its policy, from 0.
	Index int `json:"index"`
	// Channel is the step's channel.
	Channel string `json:"channel"`
	// Target is the step's target.
	Target string `json:"target"`
	// Message is the human text of the notification.
	Message string `json:"message"`
}

// Notify posts the step; any status outside 2xx is an error, which names the status and carries the
// first 256 bytes of the peer's answer (its reason: "invalid_token", "channel_not_found").
func (n WebhookNotifier) Notify(ctx context.Context, s Step) error {
	target := n.URL
	if target == "" {
		target = s.Target
	}
	body, err := json.Marshal(WebhookPayload{
		IdempotencyKey: s.IdempotencyKey(),
		Alert:          WebhookAlert{ID: s.AlertID, Name: s.AlertName},
		Step: WebhookStep{EscalationID: s.EscalationID, Index: s.StepIdx, Channel: s.Channel,
			Target: s.Target, Message: s.Message()},
	})
	if err != nil {
		return fmt.Errorf("encoding webhook payload: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building webhook request for %s: %w", redactedURL(target), errors.Unwrap(err))
	}
	// Without GetBody the transport can not send the request again: it treats a POST carrying
	// Idempotency-Key as safe to repeat when a reused connection drops after the request was
	// written, and the peer that read it before the connection died got the step twice.
	req.GetBody = nil
	for k, v := range n.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", s.IdempotencyKey())
	if len(n.Secrets) > 0 {
		ts := time.Now().Unix()
		sig, err := webhook.Sign(n.Secrets, s.IdempotencyKey(), ts, body)
		if err != nil {
			return fmt.Errorf("signing webhook: %w", err)
		}
		req.Header.Set(webhook.HeaderID, s.IdempotencyKey())
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(webhook.HeaderSignature, sig)
	}
	client := n.Client
	if client == nil {
		client = noRedirects
	}
	resp, err := client.Do(req)
	if err != nil {
		// url.Error repeats the whole URL (a Slack or Teams webhook's secret is its path); the
		// journal and the logs get its scheme and host only.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("posting webhook to %s: %w", redactedURL(target), err)
	}
	defer resp.Body.Close()
	// The peer's reason for a refusal is in its body ("invalid_token", "channel_not_found", a rate
	// limit's details): an excerpt goes into the error, as the relay's webhook sink keeps one. A few
	// bytes more than kept, so that the excerpt ends before a character the limit splits.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyBytes+utf8.UTFMax))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	// A client of the caller's that follows redirects answers with the last request's response: a
	// 301, 302 or 303 followed made the POST a GET without its body, whose 2xx is no delivery. Such
	// a request carries the redirect that made it (Request.Response). Not any request other than
	// req: http.Client sends a copy of req when it has a Timeout or the URL a user and password, and
	// tracing transports send clones; those were the delivery itself, once.
	if resp.Request != nil && resp.Request.Response != nil {
		return fmt.Errorf("posting webhook: %s redirected to %s (redirects are not followed: fix the URL)",
			redactedURL(target), redactedURL(resp.Request.URL.String()))
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		return fmt.Errorf("posting webhook: %s answered %s (redirects are not followed: fix the URL)", redactedURL(target), resp.Status)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err := fmt.Errorf("posting webhook: %s answered %s", redactedURL(target), resp.Status)
		// The peer's bytes may be anything (a NUL, invalid UTF-8): the excerpt is recordable text.
		if text := strings.TrimSpace(errtext.Recordable(string(snippet), errorBodyBytes)); text != "" {
			err = fmt.Errorf("%w: %s", err, text)
		}
		return err
	}
	return nil
}

// errorBodyBytes is how much of a refusal's body goes into a failed delivery's error, at most (as
// the relay's webhook sink keeps in a row's last_error).
const errorBodyBytes = 256

// redactedURL is raw's scheme and host, with "/…" where it has a path, query or user: what an
// error may say of a webhook URL, whose path and query are often its secret.
func redactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the webhook URL (not shown)"
	}
	out := u.Scheme + "://" + u.Host
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		out += "/…"
	}
	return out
}
