package escalation

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/pgdrain/pgdrain/internal/errtext"
	"github.com/pgdrain/pgdrain/internal/guard"
)

// OverrunGrace is how long past StepTimeout the engine waits for a Notifier that ignores its
// context before it gives up on the call (see Notifier).
const OverrunGrace = time.Second

// delivery is what one Notifier call came to, read on the call's own goroutine (see deliver): the
// engine never calls a method of the error a Notifier returned.
type delivery struct {
	failed bool
	text   string // why it failed, recordable (errtext.Recordable); "" when delivered
}

// deliver calls the Notifier of s's channel on a goroutine of its own (guard.RunUntil), with a
// context that ends after StepTimeout, and reads the error's text there. What would otherwise end
// the engine's goroutine, or the process, becomes a failed delivery of s: a panic in Notify, a
// panic in a method of the error it returned (a typed nil pointer returned as an error, whose
// Error dereferences it), and runtime.Goexit (t.FailNow in a test's Notifier), which no recover
// stops but which ends only the goroutine it runs on.
//
// A call still running OverrunGrace after its context ended is given up on and left running: it
// is a failed delivery whose outcome is unknown (s is recorded, so it is not delivered again),
// Health lists it until it returns, and its late outcome is logged.
func (e *Engine) deliver(ctx context.Context, log *slog.Logger, s Step) delivery {
	n, ok := e.notifiers[s.Channel]
	if !ok { // checked before apply; kept so a future caller can not deliver to nil
		return delivery{failed: true, text: fmt.Sprintf("%s %q", ErrNoNotifier, s.Channel)}
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StepTimeout)
	defer cancel()
	started := time.Now()
	var overrun uint64 // the call's entry in Health, once given up on
	d, returned := guard.RunUntil(func() delivery {
		if err := n.Notify(ctx, s); err != nil {
			return delivery{failed: true, text: errtext.Recordable(err.Error(), errtext.MaxBytes)}
		}
		return delivery{}
	}, func(c guard.Crash) delivery {
		text := fmt.Sprintf("notifier panicked: %v", c.Panic)
		if c.Goexit {
			text = "the notifier called runtime.Goexit (t.FailNow or t.Fatal in a test) instead of returning"
		}
		text = errtext.Recordable(text, errtext.MaxBytes)
		log.Error("escalation notifier panicked or ended its goroutine; the step counts as a failed delivery", "target", s.Target,
			"panic", errtext.Recordable(text, errtext.LogBytes), "stack", string(c.Stack))
		return delivery{failed: true, text: text}
	}, guard.Deadline[delivery]{
		At: started.Add(e.cfg.StepTimeout + OverrunGrace),
		OnAbandon: func() {
			overrun = e.health.overrunStarted(Overrun{Channel: s.Channel, Step: s.IdempotencyKey(), Started: started})
			e.metrics.overrunning.Inc()
			log.Error("escalation notifier ignores its context; given up on and left running, the step counts as a failed delivery",
				"target", s.Target, "step_timeout", e.cfg.StepTimeout)
		},
		OnLate: func(d delivery) {
			e.health.overrunEnded(overrun)
			e.metrics.overrunning.Dec()
			log.Warn("escalation notifier given up on has returned; its step stays journaled as failed",
				"target", s.Target, "after", time.Since(started).Round(time.Millisecond), "delivered", !d.failed,
				"err", errtext.Recordable(d.text, errtext.LogBytes))
		},
	})
	if returned {
		return d
	}
	return delivery{failed: true, text: fmt.Sprintf("the notifier ignored its context: still running %s after its StepTimeout (%s) ended; "+
		"given up on, the outcome is unknown", OverrunGrace, e.cfg.StepTimeout)}
}
