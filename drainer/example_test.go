package drainer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/drainer"
)

// Account is the payload of the example's events.
type Account struct {
	Account string `json:"account"`
	Email   string `json:"email"`
}

// A drainer delivering account events to an HTTP webhook. The queue is partitioned by account, so
// one account's events arrive in order even when the peer fails: the first request gets a 503,
// bob's event goes ahead (another partition), and alice's email change waits for her retried
// signup. 5xx and network errors are transient, other 4xx permanent.
func ExampleDrainer_Run() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // a database migrated with pgdrain's migrations
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `SELECT outbox.create_queue('public.account_events', partition_column => 'account',
		backoff_min => '50 milliseconds', backoff_max => '100 milliseconds')`); err != nil {
		panic(err)
	}

	// The peer: a webhook whose first answer is 503 Service Unavailable.
	var requests atomic.Int32
	delivered := make(chan struct{})
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		status := http.StatusNoContent
		n := requests.Add(1)
		if n == 1 {
			status = http.StatusServiceUnavailable
		}
		fmt.Printf("%s %s -> %d\n", r.Header.Get("X-Event-Type"), body, status)
		w.WriteHeader(status)
		if n == 4 {
			close(delivered)
		}
	}))
	defer peer.Close()

	apply := func(ctx context.Context, eventType string, a Account) error {
		ev, _ := drainer.EventFrom(ctx)
		body, err := json.Marshal(a)
		if err != nil {
			return drainer.Permanent(err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, peer.URL, bytes.NewReader(body))
		if err != nil {
			return drainer.Permanent(err)
		}
		req.Header.Set("X-Event-Type", eventType)
		req.Header.Set("Idempotency-Key", ev.EventID) // delivery is at least once; dedupe on the event_id
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err // transient: retried with backoff
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode < 300:
			return nil
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
			return fmt.Errorf("webhook: %s", resp.Status)
		default:
			return drainer.Permanent(fmt.Errorf("webhook: %s", resp.Status))
		}
	}
	decode := func(payload []byte) (Account, error) {
		var a Account
		err := json.Unmarshal(payload, &a)
		return a, err
	}

	for _, e := range []struct{ typ, account, email string }{
		{"account.created", "alice", "alice@example.com"},
		{"account.created", "bob", "bob@example.com"},
		{"account.email_changed", "alice", "alice@example.org"},
	} {
		if _, err := pool.Exec(ctx, `SELECT outbox.enqueue('public.account_events', $1,
			jsonb_build_object('account', $2::text, 'email', $3::text), $2)`, e.typ, e.account, e.email); err != nil {
			panic(err)
		}
	}

	d, err := drainer.New(pool, drainer.Config{Table: "public.account_events", ApplyTimeout: 2 * time.Second},
		decode, apply, drainer.WithLogger[Account](slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		<-delivered
		stop() // graceful: the last delivery's result is still recorded
	}()
	if err := d.Run(runCtx); err != nil {
		panic(err)
	}
	var sent int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM public.account_events WHERE sent_at IS NOT NULL`).Scan(&sent); err != nil {
		panic(err)
	}
	fmt.Println("sent:", sent)
	// Output:
	// account.created {"account":"alice","email":"alice@example.com"} -> 503
	// account.created {"account":"bob","email":"bob@example.com"} -> 204
	// account.created {"account":"alice","email":"alice@example.com"} -> 204
	// account.email_changed {"account":"alice","email":"alice@example.org"} -> 204
	// sent: 3
}
