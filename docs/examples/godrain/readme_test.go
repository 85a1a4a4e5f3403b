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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/drainer"
)

// AccountEvent is the payload of the events in public.account_events.
type AccountEvent struct {
	Account string `json:"account"`
	Email   string `json:"email"`
	Version int    `json:"version"` // the account's version after the change: 1, 2, ... in commit order
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
	// Ten accounts, ten versions each, one transaction per version: account.created by a plain
	// INSERT, then nine account.email_changed by outbox.enqueue.
	accounts := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"}
	for v := 1; v <= 10; v++ {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, a := range accounts {
				payload, _ := json.Marshal(AccountEvent{a, fmt.Sprintf("%s+%d@example.com", a, v), v})
				var err error
				if v == 1 {
					_, err = tx.Exec(ctx, `INSERT INTO public.account_events (event_type, payload, account_id)
						VALUES ('account.created', $1, $2)`, payload, a)
				} else {
					_, err = tx.Exec(ctx, `SELECT outbox.enqueue('public.account_events', 'account.email_changed',
						$1, $2)`, payload, a)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}

	// A webhook peer that answers its very first call with 503, dedupes on the Idempotency-Key, and
	// checks that each account's versions arrive in order.
	var mu sync.Mutex
	calls, delivered, version, inOrder := 0, map[string]bool{}, map[string]int{}, true
	done := make(chan struct{})
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e AccountEvent
		_ = json.NewDecoder(r.Body).Decode(&e)
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls == 1 {
			fmt.Printf("first call: %s -> 503\n", r.Header.Get("X-Event-Type"))
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if key := r.Header.Get("Idempotency-Key"); !delivered[key] {
			delivered[key] = true
			inOrder = inOrder && e.Version == version[e.Account]+1
			version[e.Account] = e.Version
			if len(delivered) == 100 {
				close(done)
			}
		}
		w.WriteHeader(http.StatusNoContent)
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
	mu.Lock()
	defer mu.Unlock()
	fmt.Printf("sent: %d, in commit order per account: %t\n", sent, inOrder)
	return err
}

// quote:end
