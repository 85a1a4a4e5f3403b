package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// report is everything the demo measured, and the checks that decide its exit code.
type report struct {
	settings    settings
	dsn         string
	migrations  []string
	produceTime time.Duration
	drainTime   time.Duration

	rows, sent, pending, transactions int64 // transactions: business transactions committed
	poisoned                          []poisonedRow
	peer                              peerSnapshot
	resultsSent, resultsTransient     float64
	resultsPermanent, replicaLost     float64
	fence                             *fenceResult
	fenceDeliveries                   []delivery
	fenceSentAt                       *time.Time
	ladder                            *ladderResult
	cli                               []cliRun
	checks                            []check
}

type poisonedRow struct {
	id        int64
	key       string
	attempts  int
	lastError string
	payload   string
}

type cliRun struct {
	args []string
	code int
	out  string
}

type check struct {
	ok   bool
	what string
}

// collect reads the final state of the queue, the peer and the replicas' counters.
func (r *report) collect(ctx context.Context, pool *pgxpool.Pool, p *peer, replicas []*replica) error {
	err := pool.QueryRow(ctx, `SELECT count(*), count(sent_at), count(*) FILTER (WHERE sent_at IS NULL AND attempt_count < 10)
		FROM demo.events`).Scan(&r.rows, &r.sent, &r.pending)
	if err != nil {
		return fmt.Errorf("reading the queue: %w", err)
	}
	rows, err := pool.Query(ctx, `SELECT id, account_id, attempt_count, coalesce(last_error, ''), payload::text
		FROM demo.events WHERE sent_at IS NULL AND attempt_count >= 10 ORDER BY id`)
	if err != nil {
		return fmt.Errorf("reading poisoned rows: %w", err)
	}
	r.poisoned, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (poisonedRow, error) {
		var x poisonedRow
		err := row.Scan(&x.id, &x.key, &x.attempts, &x.lastError, &x.payload)
		return x, err
	})
	if err != nil {
		return fmt.Errorf("reading poisoned rows: %w", err)
	}
	r.peer = p.snapshot()
	for _, rep := range replicas {
		r.resultsSent += counter(rep.metrics, "pgdrain_outbox_results_total", map[string]string{"outcome": "sent"})
		r.resultsTransient += counter(rep.metrics, "pgdrain_outbox_results_total", map[string]string{"outcome": "transient"})
		r.resultsPermanent += counter(rep.metrics, "pgdrain_outbox_results_total", map[string]string{"outcome": "permanent"})
		r.replicaLost += counter(rep.metrics, "pgdrain_outbox_lease_lost_total", nil)
	}
	if r.fence != nil && r.fence.id != 0 {
		r.fenceDeliveries = p.deliveriesOf(r.fence.id)
		_ = pool.QueryRow(ctx, `SELECT sent_at FROM demo.events WHERE id = $1`, r.fence.id).Scan(&r.fenceSentAt)
	}
	return nil
}

func (r *report) add(ok bool, format string, args ...any) {
	r.checks = append(r.checks, check{ok: ok, what: fmt.Sprintf(format, args...)})
}

// evaluate fills r.checks.
func (r *report) evaluate() {
	r.checks = nil
	s := r.settings
	r.add(r.rows == int64(s.events), "%d events written (want %d)", r.rows, s.events)
	r.add(r.sent == int64(s.events-1) && r.pending == 0, "%d sent, %d pending (want %d sent, 0 pending)", r.sent, r.pending, s.events-1)
	malformed := len(r.poisoned) == 1 && strings.Contains(r.poisoned[0].payload, `"twelve"`) &&
		strings.Contains(r.poisoned[0].lastError, "HTTP 422")
	r.add(malformed, "exactly one poisoned event, the malformed one, with the peer's 422 (got %d poisoned)", len(r.poisoned))
	r.add(r.peer.accepted == s.events-1, "the peer accepted %d distinct events (want %d)", r.peer.accepted, s.events-1)
	r.add(len(r.peer.violations) == 0, "per-key order at the peer: %d violations (want 0)", len(r.peer.violations))
	r.add(r.peer.transient > 0, "the peer failed %d calls transiently and each was retried", r.peer.transient)
	r.add(int64(r.resultsSent) == r.sent, "sent results recorded by the replicas (%.0f) = rows sent (%d)", r.resultsSent, r.sent)
	f := r.fence
	fenceOK := f != nil && f.err == nil && f.id != 0 && f.leaseLost == 1 && f.recorded == 0 &&
		len(r.fenceDeliveries) >= 1 && r.fenceDeliveries[0].replica != "stalled" && r.fenceSentAt != nil &&
		f.returnedAt.Sub(f.claimedAt) > stalledLease
	r.add(fenceOK, "fencing: the stalled apply's late result was refused and the row was delivered by the next holder")
	l := r.ladder
	ladderOK := l != nil && l.err == nil && l.completed && l.stoppedEarly && len(l.pages) == 4 && l.repeated == 0 && l.journaled == 4
	r.add(ladderOK, "escalation ladder: 3 steps delivered for the poisoned event, 1 for the resolved alert, none twice")
	for _, c := range r.cli {
		r.add(c.code == 0, "pgdrain %s exits 0 (got %d)", strings.Join(c.args, " "), c.code)
	}
}

func (r *report) passed() bool {
	for _, c := range r.checks {
		if !c.ok {
			return false
		}
	}
	return len(r.checks) > 0
}

func (r *report) print(w io.Writer) {
	r.evaluate()
	s := r.settings
	rate := float64(r.sent) / r.drainTime.Seconds()
	fmt.Fprintf(w, "\n== report\n")
	fmt.Fprintf(w, "written      %d events over %d accounts in %d business transactions (%d producers, %s); each event commits with its account change\n",
		r.rows, s.keys, r.transactions, s.producers, r.produceTime.Round(time.Millisecond))
	fmt.Fprintf(w, "drained      %d sent, %d poisoned, %d pending in %s by %d replicas: %.0f events/s end to end\n",
		r.sent, len(r.poisoned), r.pending, r.drainTime.Round(time.Millisecond), s.replicas, rate)
	fmt.Fprintf(w, "peer         %d calls: %d accepted, %d failed with 503 (transient), %d rejected with 422, %d duplicate deliveries\n",
		r.peer.calls, r.peer.accepted, r.peer.transient, len(r.peer.rejected), r.peer.duplicates)
	fmt.Fprintf(w, "recorded     sent %.0f, transient %.0f, permanent %.0f (pgdrain_outbox_results_total over the replicas); lease lost %.0f\n",
		r.resultsSent, r.resultsTransient, r.resultsPermanent, r.replicaLost)
	for _, p := range r.poisoned {
		fmt.Fprintf(w, "poisoned     event #%d (%s) after %d attempts: %s\n             payload %s; the rest of %s was delivered past it\n",
			p.id, p.key, p.attempts, p.lastError, p.payload, p.key)
	}
	fmt.Fprintf(w, "order        %d violations of per-key id order at the peer over %d accounts\n", len(r.peer.violations), s.keys)
	for i, v := range r.peer.violations {
		if i == 5 {
			fmt.Fprintf(w, "             ... %d more\n", len(r.peer.violations)-5)
			break
		}
		fmt.Fprintf(w, "             %s\n", v)
	}
	if f := r.fence; f != nil {
		switch {
		case f.err != nil:
			fmt.Fprintf(w, "fencing      failed to run: %v\n", f.err)
		case f.id == 0:
			fmt.Fprintf(w, "fencing      the stalled drainer claimed nothing\n")
		default:
			fmt.Fprintf(w, "fencing      event #%d (%s): the stalled drainer leased it for %s, then its apply ignored the deadline and returned after %s\n",
				f.id, f.key, stalledLease, f.returnedAt.Sub(f.claimedAt).Round(time.Millisecond))
			for i, d := range r.fenceDeliveries {
				label := "delivered by the next holder"
				if i > 0 {
					label = "the late call (a duplicate the peer can drop by X-Event-Id)"
				}
				fmt.Fprintf(w, "             peer: +%s from %s: %s\n", d.at.Round(time.Millisecond), d.replica, label)
			}
			if f.lateErr != nil {
				fmt.Fprintf(w, "             the late call itself failed (%v); its result would have been transient\n", f.lateErr)
			}
			fmt.Fprintf(w, "             its late result was refused by the lease token: lease lost %.0f, results recorded by the stalled drainer %.0f\n",
				f.leaseLost, f.recorded)
		}
	}
	if l := r.ladder; l != nil {
		if l.err != nil {
			fmt.Fprintf(w, "ladder       failed: %v\n", l.err)
		}
		for _, p := range l.pages {
			fmt.Fprintf(w, "ladder       paged %-20s step %d of %q\n", p.Step.Target, p.Step.Index+1, p.Alert.Name)
		}
		fmt.Fprintf(w, "             %d deliveries journaled, %d repeated; poisoned-event ladder completed: %t; resolved alert stopped after step 1: %t\n",
			l.journaled, l.repeated, l.completed, l.stoppedEarly)
	}
	for _, c := range r.cli {
		fmt.Fprintf(w, "\n$ pgdrain %s\n%s", strings.Join(c.args, " "), c.out)
	}
	fmt.Fprintf(w, "\n== checks\n")
	failed := 0
	for _, c := range r.checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%s %s\n", mark, c.what)
	}
	if failed == 0 {
		fmt.Fprintf(w, "\nall %d checks passed\n", len(r.checks))
	} else {
		fmt.Fprintf(w, "\n%d of %d checks FAILED\n", failed, len(r.checks))
	}
}
