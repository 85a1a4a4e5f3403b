// Package guard runs a caller's function (an Applier, a TxApplier, a Notifier) on a goroutine of
// its own, so that nothing it does ends the goroutine that called it, or the process: a panic is
// recovered there, runtime.Goexit (t.FailNow or t.Fatal in a test's callback), which no recover
// stops, ends only that goroutine, and a function that ignores its context can be given up on at
// a deadline and left running (RunUntil). Each becomes a value of the caller's choosing, made on
// the function's goroutine: a caller that reads the function's error there (its Error may panic
// too: a typed nil pointer returned as an error) is guarded while it does.
package guard

import (
	"runtime/debug"
	"sync"
	"time"
)

// Crash is how a guarded function ended without returning.
type Crash struct {
	// Panic is the value the function panicked with; nil after runtime.Goexit. (A panic(nil)
	// panics with a *runtime.PanicNilError since Go 1.21, so nil means Goexit.)
	Panic any
	// Goexit: the function's goroutine was ended by runtime.Goexit (t.FailNow, t.Fatal, or
	// anything else that calls it), not by a panic.
	Goexit bool
	// Stack is the goroutine's stack where it ended (runtime/debug.Stack), for the log.
	Stack []byte
}

// Deadline is when RunUntil stops waiting for a function still running, and what happens then.
type Deadline[T any] struct {
	// At is when the call is abandoned if it has not ended (a time already past: at once, unless
	// it ended meanwhile).
	At time.Time
	// OnAbandon, if not nil, runs once the call is abandoned, on RunUntil's goroutine before
	// RunUntil returns. OnLate does not start before it has returned.
	OnAbandon func()
	// OnLate, if not nil, gets the value an abandoned call came to once it ends (what it returned,
	// or what crashed made of its panic), on the call's goroutine.
	OnLate func(T)
}

// Run runs fn on a goroutine of its own and returns what fn returned or, when fn panicked or called
// runtime.Goexit, what crashed made of that. crashed runs on fn's goroutine, after recover; it
// must not panic itself. Run waits for fn however long it takes.
func Run[T any](fn func() T, crashed func(Crash) T) T {
	c := start(fn, crashed, nil)
	return <-c.done
}

// RunUntil is Run that gives up waiting at d.At: a call that has not ended by then is abandoned
// and left running. RunUntil then runs d.OnAbandon and returns the zero T and false; the call's
// value goes to d.OnLate once it ends. A call that ends before d.At, or while it is being given up
// on, is not abandoned: RunUntil returns its value and true.
func RunUntil[T any](fn func() T, crashed func(Crash) T, d Deadline[T]) (T, bool) {
	c := start(fn, crashed, d.OnLate)
	timer := time.NewTimer(time.Until(d.At))
	defer timer.Stop()
	select {
	case v := <-c.done:
		return v, true
	case <-timer.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case v := <-c.done: // ended just now
		return v, true
	default:
	}
	c.abandoned = true
	if d.OnAbandon != nil {
		d.OnAbandon()
	}
	var zero T
	return zero, false
}

// call is one guarded function's way back to its caller.
type call[T any] struct {
	done chan T // buffered: the call never blocks on it
	late func(T)

	mu        sync.Mutex
	abandoned bool // the caller stopped waiting: the value goes to late
}

// start runs fn on a goroutine of its own; its value, or crashed's, goes to c.done, or to late
// once the call was abandoned.
func start[T any](fn func() T, crashed func(Crash) T, late func(T)) *call[T] {
	c := &call[T]{done: make(chan T, 1), late: late}
	go func() {
		returned := false
		defer func() {
			if returned {
				return
			}
			p := recover()
			c.deliver(crashed(Crash{Panic: p, Goexit: p == nil, Stack: debug.Stack()}))
		}()
		v := fn()
		returned = true
		c.deliver(v)
	}()
	return c
}

// deliver hands v to the caller, or to late when the caller gave up on the call.
func (c *call[T]) deliver(v T) {
	c.mu.Lock()
	abandoned := c.abandoned
	if !abandoned {
		c.done <- v
	}
	c.mu.Unlock()
	if abandoned && c.late != nil {
		c.late(v)
	}
}
