package godrain_test

// quote:begin
import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/drainer"
)

// AccountEvent is the payload of the events in public.account_events.
type AccountEvent struct {
	Account string `json:"account"`
	Email   string `json:"email"`
}

func run(ctx context.Context, dsn string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, `SELECT outbox.create_queue('public.account_events',
		partition_column => 'account_id', backoff_min => '100 milliseconds')`)
	if err != nil {
		return err
	}

	// Producers: each event commits with the business change it announces (here, just the event).
	for _, e := range []AccountEvent{{"alice", "alice@example.com"}, {"bob", "bob@example.com"}} {
		payload, _ := json.Marshal(e)
		if _, err := pool.Exec(ctx, `INSERT INTO public.account_events (event_type, payload, account_id)
			VALUES ('account.created', $1, $2)`, payload, e.Account); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, `SELECT outbox.enqueue('public.account_events', 'account.email_changed',
		'{"account": "alice", "email": "alice@example.org"}', 'alice')`); err != nil {
		return err
	}

	// A webhook peer that answers its very first call with 503.
	var mu sync.Mutex
	calls, done := 0, make(chan struct{})
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e AccountEvent
		_ = json.NewDecoder(r.Body).Decode(&e)
		mu.Lock()
		defer mu.Unlock()
		calls++
		status := http.StatusNoContent
		if calls == 1 {
			status = http.StatusServiceUnavailable
		}
		fmt.Printf("%s %s -> %d\n", r.Header.Get("X-Event-Type"), e.Account, status)
		w.WriteHeader(status)
		if calls == 4 {
			close(done)
		}
	}))
	defer peer.Close()

	// quote:excerpt:begin
	// The Applier: 2xx = sent; 4xx = permanent (the row is poisoned); anything else is transient
	// (retried with backoff, and later events of the same account wait).
	apply := func(ctx context.Context, eventType string, e AccountEvent) error {
		ev, _ := drainer.EventFrom(ctx)
		body, _ := json.Marshal(e)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, peer.URL, bytes.NewReader(body))
		if err != nil {
			return drainer.Permanent(err)
		}
		req.Header.Set("X-Event-Type", eventType)
		req.Header.Set("Idempotency-Key", ev.EventID) // delivery is at least once; dedupe on the event_id
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode < 300:
			return nil
		case resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
			return drainer.Permanent(fmt.Errorf("webhook: %s", resp.Status))
		default:
			return fmt.Errorf("webhook: %s", resp.Status)
		}
	}
	decode := func(payload []byte) (AccountEvent, error) {
		var e AccountEvent
		return e, json.Unmarshal(payload, &e)
	}

	d, err := drainer.New(pool, drainer.Config{Table: "public.account_events", ApplyTimeout: 2 * time.Second},
		decode, apply)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() { <-done; stop() }() // Run returns after recording the applies in flight
	if err := d.Run(runCtx); err != nil {
		return err
	}
	// quote:excerpt:end
	var sent int
	err = pool.QueryRow(ctx, `SELECT count(*) FROM public.account_events WHERE sent_at IS NOT NULL`).Scan(&sent)
	fmt.Println("sent:", sent)
	return err
}

// quote:end
