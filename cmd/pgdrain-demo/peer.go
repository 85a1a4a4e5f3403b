package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"
)

// peer is the demo's webhook receiver on 127.0.0.1. It fails a share of calls transiently (503),
// rejects an event whose amount is not a number permanently (422), and checks per-key order: for
// each account the first deliveries must arrive in id order. Later deliveries of an id already
// accepted are duplicates (delivery is at least once) and are counted, not checked.
type peer struct {
	failRate float64
	start    time.Time
	server   *http.Server
	url      string

	mu         sync.Mutex
	rng        *rand.Rand
	calls      int
	transient  int
	lastByKey  map[string]int64
	first      map[int64]delivery
	duplicates map[int64][]delivery
	violations []string
	rejected   map[int64]string
}

// delivery is one accepted call.
type delivery struct {
	replica string
	at      time.Duration // since the peer started
}

// eventBody is the payload the demo's producers write.
type eventBody struct {
	Account string          `json:"account"`
	Seq     int             `json:"seq"`
	Amount  json.RawMessage `json:"amount"`
}

func startPeer(failRate float64) (*peer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the webhook peer: %w", err)
	}
	p := &peer{
		failRate:   failRate,
		start:      time.Now(),
		rng:        rand.New(rand.NewPCG(7, 7)),
		lastByKey:  map[string]int64{},
		first:      map[int64]delivery{},
		duplicates: map[int64][]delivery{},
		rejected:   map[int64]string{},
		url:        "http://" + ln.Addr().String() + "/events",
	}
	p.server = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 5 * time.Second}
	go p.server.Serve(ln)
	return p, nil
}

func (p *peer) serve(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.Header.Get("X-Event-Id"), 10, 64)
	if err != nil {
		http.Error(w, "X-Event-Id must be the event id", http.StatusBadRequest)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading body", http.StatusBadRequest)
		return
	}
	var body eventBody
	if err := json.Unmarshal(raw, &body); err != nil || body.Account == "" {
		http.Error(w, "body must be an event with an account", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	var amount float64
	if err := json.Unmarshal(body.Amount, &amount); err != nil {
		msg := fmt.Sprintf("amount must be a number, got %s", body.Amount)
		p.rejected[id] = msg
		http.Error(w, msg, http.StatusUnprocessableEntity)
		return
	}
	if p.rng.Float64() < p.failRate {
		p.transient++
		http.Error(w, "peer overloaded, try again", http.StatusServiceUnavailable)
		return
	}
	d := delivery{replica: r.Header.Get("X-Replica"), at: time.Since(p.start)}
	if _, seen := p.first[id]; seen {
		p.duplicates[id] = append(p.duplicates[id], d)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if last := p.lastByKey[body.Account]; id < last {
		p.violations = append(p.violations, fmt.Sprintf("%s: event %d arrived after event %d", body.Account, id, last))
	}
	p.lastByKey[body.Account] = id
	p.first[id] = d
	w.WriteHeader(http.StatusNoContent)
}

// peerSnapshot is what the progress line and the report read.
type peerSnapshot struct {
	calls, transient, accepted, duplicates int
	violations                             []string
	rejected                               map[int64]string
}

func (p *peer) snapshot() peerSnapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := peerSnapshot{calls: p.calls, transient: p.transient, accepted: len(p.first),
		violations: append([]string(nil), p.violations...), rejected: map[int64]string{}}
	for _, d := range p.duplicates {
		s.duplicates += len(d)
	}
	for id, msg := range p.rejected {
		s.rejected[id] = msg
	}
	return s
}

// deliveriesOf returns every accepted delivery of id, first one first.
func (p *peer) deliveriesOf(id int64) []delivery {
	p.mu.Lock()
	defer p.mu.Unlock()
	first, ok := p.first[id]
	if !ok {
		return nil
	}
	out := append([]delivery{first}, p.duplicates[id]...)
	sort.SliceStable(out[1:], func(i, j int) bool { return out[1+i].at < out[1+j].at })
	return out
}

func (p *peer) close() { p.server.Close() }
