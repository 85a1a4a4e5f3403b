package webhook

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
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pgdrain/pgdrain/internal/errtext"
	"github.com/pgdrain/pgdrain/relay"
)

// errorBodyBytes is how much of a refusal's body goes into the row's last_error, at most.
const errorBodyBytes = 256

// Sink POSTs events to one endpoint. It is safe for concurrent use.
type Sink struct {
	cfg     Config
	headers headerPolicy // cfg.EventHeaders
	client  *http.Client
	now     func() time.Time
}

var _ relay.Sink = (*Sink)(nil)

// New returns a Sink for cfg, or every problem of cfg.
func New(cfg Config) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Body == "" {
		cfg.Body = BodyEnvelope
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.EventHeaders == nil {
		cfg.EventHeaders = DefaultEventHeaders
	}
	return &Sink{cfg: cfg, headers: newHeaderPolicy(cfg.EventHeaders), client: client, now: time.Now}, nil
}

// Deliver POSTs every event at once (they belong to different keys) and waits for all answers.
func (s *Sink) Deliver(ctx context.Context, events []relay.Event) []relay.Result {
	out := make([]relay.Result, len(events))
	var wg sync.WaitGroup
	for i, e := range events {
		wg.Go(func() { out[i] = s.post(ctx, e) })
	}
	wg.Wait()
	return out
}

// Close closes idle connections.
func (s *Sink) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// envelope is the Standard Webhooks payload structure.
type envelope struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

func (s *Sink) body(e relay.Event) ([]byte, error) {
	if s.cfg.Body == BodyPayload {
		return e.Payload, nil
	}
	return json.Marshal(envelope{Type: e.Type, Timestamp: e.CreatedAt.UTC(), Data: e.Payload})
}

// post sends one event and classifies the answer.
func (s *Sink) post(ctx context.Context, e relay.Event) relay.Result {
	body, err := s.body(e)
	if err != nil {
		return relay.PermanentResult(fmt.Errorf("encoding the body: %w", err))
	}
	ts := s.now().Unix()
	sig, err := Sign(s.cfg.Secrets, e.Identity, ts, body)
	if err != nil {
		return relay.PermanentResult(err) // Validate makes this unreachable
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return relay.PermanentResult(fmt.Errorf("building the request: %w", err))
	}
	// The event's headers that Config.EventHeaders allows first, so the operator's (Config.Headers:
	// an API key) win over a producer's, and the sink's own (identity, signature) over both.
	if err := setEventHeaders(req.Header, e.Headers, s.headers); err != nil {
		return relay.PermanentResult(err)
	}
	for k, v := range s.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderID, e.Identity)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, sig)
	resp, err := s.client.Do(req)
	if err != nil {
		// Timeouts, refused and reset connections, TLS trouble: the peer may take it later.
		return relay.TransientResult(fmt.Errorf("POST %s: %w", endpoint(s.cfg.URL), unwrapURLError(err)))
	}
	defer resp.Body.Close()
	// A few bytes more than kept, so that the excerpt ends before a character the limit splits.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyBytes+utf8.UTFMax))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	return classify(resp, snippet, s.now())
}

// retryable4xx are the client errors a peer answers for a request it may take later: 408 Request
// Timeout, 421 Misdirected Request (RFC 9110: the connection went to a server that does not serve
// the URL; another connection may), 425 Too Early (RFC 8470) and 429 Too Many Requests.
var retryable4xx = map[int]bool{
	http.StatusRequestTimeout: true, http.StatusMisdirectedRequest: true,
	http.StatusTooEarly: true, http.StatusTooManyRequests: true,
}

// classify maps an answer to a Result: 2xx sent; 408, 421, 425, 429, 3xx and 5xx transient (with
// the Retry-After the peer sent); other 4xx permanent.
func classify(resp *http.Response, snippet []byte, now time.Time) relay.Result {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return relay.SentResult()
	}
	err := fmt.Errorf("peer answered %s", resp.Status)
	// The peer's bytes may be anything (a NUL, invalid UTF-8): the excerpt is recordable text.
	if text := strings.TrimSpace(errtext.Recordable(string(snippet), errorBodyBytes)); text != "" {
		err = fmt.Errorf("%w: %s", err, text)
	}
	switch {
	case code >= 400 && code < 500 && !retryable4xx[code]:
		return relay.PermanentResult(err)
	case code >= 300 && code < 400:
		err = fmt.Errorf("%w (redirects are not followed: fix the URL)", err)
	}
	return relay.Result{Outcome: relay.Transient, Err: err, RetryAfter: RetryAfter(resp.Header.Get("Retry-After"), now)}
}

// MaxRetryAfter is the longest delay a Retry-After is taken for: a peer asking for longer gets it.
const MaxRetryAfter = 24 * time.Hour

// RetryAfter parses a Retry-After value, delta seconds or an HTTP date, into a delay from now, at
// most MaxRetryAfter (0 when absent, malformed, or in the past). Seconds too many for an int64 are
// MaxRetryAfter too.
func RetryAfter(value string, now time.Time) time.Duration {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0
	}
	secs, err := strconv.ParseInt(value, 10, 64)
	switch {
	case err == nil && secs <= 0:
		return 0
	case err == nil:
		return time.Duration(min(secs, int64(MaxRetryAfter/time.Second))) * time.Second
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(value, "-"):
		return MaxRetryAfter
	}
	if t, err := http.ParseTime(value); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}

// endpoint is the URL as a delivery error names it in a row's last_error and the logs, which
// pgdrain_reader and the console's read-only logins see: its scheme and host. The path and the
// query may hold the credential (a Slack-style webhook's path, ?api_key=), as may the userinfo.
func endpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the webhook URL"
	}
	if u.Path == "" && u.RawQuery == "" {
		return u.Scheme + "://" + u.Host
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// unwrapURLError drops *url.Error's "Post \"URL\": " prefix, which repeats the URL (and would
// print a password in it).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}
