package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pgdrain/pgdrain/internal/cohort"
)

// request is one event waiting for its batch's Result.
type request struct {
	ctx    context.Context
	event  Event
	cohort *cohort.Cohort // the applies the drainer started with this one; nil: unknown
	done   chan Result    // buffered: a result nobody waits for any more is dropped
}

// batcher groups events applied at the same time into Deliver calls of up to max events. The
// drainer applies each event in its own goroutine (ApplyConcurrency slots), so a batch is made of
// the events in flight together. A batch that is not full leaves as soon as every event the
// drainer started together with its events has arrived (internal/cohort: nothing else comes until
// the drainer claims again, which waits for these slots), else after linger.
type batcher struct {
	sink    Sink
	max     int
	linger  time.Duration
	observe func(events []Event, results []Result, took time.Duration)

	in       chan *request
	stop     chan struct{}
	stopOnce sync.Once
	loopDone chan struct{}
	inflight sync.WaitGroup // Deliver calls running
}

func newBatcher(sink Sink, max int, linger time.Duration, observe func([]Event, []Result, time.Duration)) *batcher {
	b := &batcher{sink: sink, max: max, linger: linger, observe: observe,
		in: make(chan *request), stop: make(chan struct{}), loopDone: make(chan struct{})}
	if max > 1 {
		go b.loop()
	} else {
		close(b.loopDone)
	}
	return b
}

// deliver delivers one event and waits for its Result, or for ctx to end (then the event is
// transient: it will be delivered again).
func (b *batcher) deliver(ctx context.Context, e Event) Result {
	if b.max == 1 {
		b.inflight.Add(1)
		defer b.inflight.Done()
		return b.call(ctx, []*request{{ctx: ctx, event: e}})[0]
	}
	req := &request{ctx: ctx, event: e, cohort: cohort.From(ctx), done: make(chan Result, 1)}
	select {
	case b.in <- req:
	case <-ctx.Done():
		req.left()
		return TransientResult(fmt.Errorf("waiting for a batch: %w", ctx.Err()))
	case <-b.stop:
		req.left()
		return TransientResult(errors.New("relay is stopping"))
	}
	select {
	case r := <-req.done:
		return r
	case <-ctx.Done():
		return TransientResult(fmt.Errorf("waiting for the sink: %w", ctx.Err()))
	}
}

// loop collects batches: the first event opens one, which leaves when full or after linger.
func (b *batcher) loop() {
	defer close(b.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var batch []*request
		var starts starts
		select {
		case r := <-b.in:
			r.left()
			batch = append(batch, r)
			starts.add(r.cohort)
		case <-b.stop:
			return
		}
		timer.Reset(b.linger)
	collect:
		for len(batch) < b.max && !starts.allArrived() {
			select {
			case r := <-b.in:
				r.left()
				batch = append(batch, r)
				starts.add(r.cohort)
			case <-timer.C:
				break collect
			case <-b.stop:
				break collect
			}
		}
		timer.Stop()
		b.inflight.Add(1)
		go func() {
			defer b.inflight.Done()
			ctx, cancel := batchContext(batch)
			results := b.call(ctx, batch)
			cancel()
			for i, r := range batch {
				r.done <- results[i]
			}
		}()
	}
}

// left counts r out of its cohort: it reached a batch, or it gave up before one.
func (r *request) left() {
	if r.cohort != nil {
		r.cohort.Done()
	}
}

// starts are the cohorts of a batch's events (few: the drainer's starts of one claim or two).
type starts struct {
	cohorts []*cohort.Cohort
	unknown bool // an event came without one
}

func (s *starts) add(c *cohort.Cohort) {
	if c == nil {
		s.unknown = true
		return
	}
	for _, have := range s.cohorts {
		if have == c {
			return
		}
	}
	s.cohorts = append(s.cohorts, c)
}

// allArrived reports whether every event started together with the batch's events has reached
// the batcher: false when one of them came without a cohort (the batch waits for the linger).
func (s *starts) allArrived() bool {
	if s.unknown {
		return false
	}
	for _, c := range s.cohorts {
		if !c.Complete() {
			return false
		}
	}
	return true
}

// batchContext ends at the earliest deadline of the batch's events: each is bounded by its lease.
// The events' contexts are not cancelled before their deadline (the drainer lets an apply finish
// at shutdown), so the batch needs only their deadlines.
func batchContext(batch []*request) (context.Context, context.CancelFunc) {
	var earliest time.Time
	for _, r := range batch {
		if d, ok := r.ctx.Deadline(); ok && (earliest.IsZero() || d.Before(earliest)) {
			earliest = d
		}
	}
	ctx := context.WithoutCancel(batch[0].ctx)
	if earliest.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, earliest)
}

// call runs Deliver and makes sure there is one Result per event: a sink that returns another
// number of results (a bug) makes every event of the batch transient, and a panic is caught the
// same way, so the rows are retried rather than recorded on a guess.
func (b *batcher) call(ctx context.Context, batch []*request) (results []Result) {
	events := make([]Event, len(batch))
	for i, r := range batch {
		events[i] = r.event
	}
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			results = allTransient(len(events), fmt.Errorf("sink panicked: %v", p))
		}
		b.observe(events, results, time.Since(start))
	}()
	results = b.sink.Deliver(ctx, events)
	if len(results) != len(events) {
		return allTransient(len(events), fmt.Errorf("sink returned %d results for %d events", len(results), len(events)))
	}
	return results
}

func allTransient(n int, err error) []Result {
	out := make([]Result, n)
	for i := range out {
		out[i] = TransientResult(err)
	}
	return out
}

// close stops taking events and waits for the Deliver calls in flight.
func (b *batcher) close() {
	b.stopOnce.Do(func() { close(b.stop) })
	<-b.loopDone
	b.inflight.Wait()
}
