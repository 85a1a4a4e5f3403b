package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/escalation"
)

// The escalation ladder (schema alr): the poisoned event raises an alert that escalates through
// three steps to a pager webhook, and a second alert is resolved after its first step, which stops
// its ladder. Two engines take steps concurrently; each step must reach the pager exactly once
// ("record, then deliver").

// pager is the ladder's webhook receiver: it counts deliveries per idempotency key.
type pager struct {
	mu         sync.Mutex
	deliveries map[string]int
	order      []escalation.WebhookPayload
	server     *http.Server
	url        string
}

func startPager() (*pager, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the pager webhook: %w", err)
	}
	p := &pager{deliveries: map[string]int{}, url: "http://" + ln.Addr().String() + "/page"}
	p.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body escalation.WebhookPayload
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "bad payload", http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.deliveries[r.Header.Get("Idempotency-Key")]++
		p.order = append(p.order, body)
		p.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	go p.server.Serve(ln)
	return p, nil
}

// ladderResult is what the report says about the ladder.
type ladderResult struct {
	pages        []escalation.WebhookPayload // in arrival order
	repeated     int                         // idempotency keys delivered more than once
	journaled    int                         // alr.delivery_journal rows
	completed    bool                        // the poisoned-event alert's ladder ran to its end
	stoppedEarly bool                        // the resolved alert's ladder stopped after step 1
	err          error
}

// ladderSteps: page the primary at once, the secondary 300 ms later, the manager 300 ms after that.
const ladderSteps = `[
  {"delay": "0 seconds",        "channel": "webhook", "target": "oncall-primary"},
  {"delay": "300 milliseconds", "channel": "webhook", "target": "oncall-secondary"},
  {"delay": "300 milliseconds", "channel": "webhook", "target": "engineering-manager"}]`

func runLadder(ctx context.Context, pool *pgxpool.Pool, poisonedAlert string, logger *slog.Logger) ladderResult {
	var res ladderResult
	pg, err := startPager()
	if err != nil {
		res.err = err
		return res
	}
	defer pg.server.Close()

	var policy, alertA, alertB, ladderA, ladderB string
	err = pool.QueryRow(ctx, `SELECT alr.create_policy('demo on-call', $1::jsonb)::text`, ladderSteps).Scan(&policy)
	if err == nil {
		err = pool.QueryRow(ctx, `SELECT alr.add_alert($1)::text`, poisonedAlert).Scan(&alertA)
	}
	if err == nil {
		err = pool.QueryRow(ctx, `SELECT alr.add_alert('demo webhook peer: 5xx rate above 5%')::text`).Scan(&alertB)
	}
	if err == nil {
		err = pool.QueryRow(ctx, `SELECT alr.start_escalation($1::uuid, $2::uuid)::text`, alertA, policy).Scan(&ladderA)
	}
	if err == nil {
		err = pool.QueryRow(ctx, `SELECT alr.start_escalation($1::uuid, $2::uuid)::text`, alertB, policy).Scan(&ladderB)
	}
	if err != nil {
		res.err = fmt.Errorf("setting up the ladder: %w", err)
		return res
	}

	engineCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 2 {
		eng, err := escalation.New(pool, map[string]escalation.Notifier{
			"webhook": escalation.WebhookNotifier{URL: pg.url},
		}, escalation.Config{Tick: 50 * time.Millisecond, Lease: 5 * time.Second, StepTimeout: 2 * time.Second,
			Logger: logger.With("engine", i+1)})
		if err != nil {
			stop()
			res.err = fmt.Errorf("starting escalation engine: %w", err)
			return res
		}
		wg.Go(func() { _ = eng.Run(engineCtx) })
	}

	// Resolve the second alert once its first step went out; wait for the first ladder to end.
	deadline := time.Now().Add(15 * time.Second)
	resolved := false
	for time.Now().Before(deadline) && !(res.completed && resolved) {
		time.Sleep(50 * time.Millisecond)
		if !resolved && pg.delivered(ladderB+":0") {
			if _, err := pool.Exec(ctx, `SELECT alr.resolve_alert($1::uuid)`, alertB); err != nil {
				res.err = fmt.Errorf("resolving alert: %w", err)
				break
			}
			resolved = true
		}
		_ = pool.QueryRow(ctx, `SELECT stop_reason IS NOT DISTINCT FROM 'completed' FROM alr.alert_escalations WHERE id = $1::uuid`,
			ladderA).Scan(&res.completed)
	}
	// Give the engines a few more ticks: a stopped ladder must stay silent.
	time.Sleep(700 * time.Millisecond)
	stop()
	wg.Wait()

	var stepB int
	var reasonB *string
	if err := pool.QueryRow(ctx, `SELECT step_idx, stop_reason FROM alr.alert_escalations WHERE id = $1::uuid`, ladderB).
		Scan(&stepB, &reasonB); err == nil {
		res.stoppedEarly = resolved && stepB == 1 && reasonB != nil && *reasonB == "resolved"
	}
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM alr.delivery_journal WHERE outcome = 'delivered'`).Scan(&res.journaled)
	pg.mu.Lock()
	defer pg.mu.Unlock()
	res.pages = append(res.pages, pg.order...)
	for _, n := range pg.deliveries {
		if n > 1 {
			res.repeated++
		}
	}
	return res
}

func (p *pager) delivered(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deliveries[key] > 0
}
