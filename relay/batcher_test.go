package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/cohort"
)

// recordingSink keeps the size of every Deliver call.
type recordingSink struct {
	mu    sync.Mutex
	sizes []int
}

func (s *recordingSink) Deliver(_ context.Context, events []Event) []Result {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(events))
	s.mu.Unlock()
	return make([]Result, len(events))
}

func (s *recordingSink) Close() error { return nil }

func (s *recordingSink) calls() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

// newRecordingBatcher is a batcher of up to 32 events with linger, closed when the test ends.
func newRecordingBatcher(t *testing.T, linger time.Duration) (*recordingSink, *batcher) {
	sink := &recordingSink{}
	b := newBatcher(sink, 32, linger, func([]Event, []Result, time.Duration) {})
	t.Cleanup(b.close)
	return sink, b
}

// deliverAll delivers one event per context at once and waits for every result.
func deliverAll(b *batcher, ctxs []context.Context) []Result {
	results := make([]Result, len(ctxs))
	var wg sync.WaitGroup
	for i, ctx := range ctxs {
		wg.Go(func() { results[i] = b.deliver(ctx, Event{ID: int64(i + 1)}) })
	}
	wg.Wait()
	return results
}

// A batch that is not full leaves as soon as every event the drainer started with its events has
// arrived: with an hour of linger, three events of a cohort of three go in one Deliver call at
// once (the test's deadline is what would fail).
func TestBatcher_SendsACohortWithoutWaitingForTheLinger(t *testing.T) {
	sink, b := newRecordingBatcher(t, time.Hour)
	c := cohort.New(3)
	ctx, cancel := context.WithTimeout(cohort.With(context.Background(), c), 10*time.Second)
	defer cancel()

	results := deliverAll(b, []context.Context{ctx, ctx, ctx})

	for _, r := range results {
		require.Equal(t, Sent, r.Outcome, "%v", r.Err)
	}
	require.Equal(t, []int{3}, sink.calls())
}

// A member the drainer never applies (cohort.Done on its behalf) does not hold the others back.
func TestBatcher_ACohortMemberThatNeverComesDoesNotHoldTheBatch(t *testing.T) {
	sink, b := newRecordingBatcher(t, time.Hour)
	c := cohort.New(3)
	c.Done() // its lease was lost before its apply
	ctx, cancel := context.WithTimeout(cohort.With(context.Background(), c), 10*time.Second)
	defer cancel()

	results := deliverAll(b, []context.Context{ctx, ctx})

	for _, r := range results {
		require.Equal(t, Sent, r.Outcome, "%v", r.Err)
	}
	require.Equal(t, []int{2}, sink.calls())
}

// An event without a cohort (an Applier's caller that does not say what it started together), or
// a cohort still missing members, keeps the batch open for the linger: here two of a cohort of
// three arrive and wait for the third, which comes after a moment and joins them.
func TestBatcher_AnIncompleteCohortWaitsForItsLastMember(t *testing.T) {
	sink, b := newRecordingBatcher(t, time.Hour)
	c := cohort.New(3)
	ctx, cancel := context.WithTimeout(cohort.With(context.Background(), c), 10*time.Second)
	defer cancel()

	var late Result
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(100 * time.Millisecond)
		late = b.deliver(ctx, Event{ID: 3})
	})
	results := deliverAll(b, []context.Context{ctx, ctx})
	wg.Wait()

	require.Equal(t, Sent, late.Outcome, "%v", late.Err)
	for _, r := range results {
		require.Equal(t, Sent, r.Outcome, "%v", r.Err)
	}
	require.Equal(t, []int{3}, sink.calls())

	// Without a cohort the batch waits for its linger (a second here) or a full batch.
	sink2, b2 := newRecordingBatcher(t, time.Second)
	plain, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	for _, r := range deliverAll(b2, []context.Context{plain, plain}) {
		require.Equal(t, Sent, r.Outcome, "%v", r.Err)
	}
	require.Equal(t, []int{2}, sink2.calls())
}
