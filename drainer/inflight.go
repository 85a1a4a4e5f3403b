package drainer

import "sync"

// inFlight is the set of rows whose Applier call is running in one Drainer, across its Runs and
// claim modes. An apply that ignores its context outlives its lease (lease mode), its batch (lock
// mode) or its Run, and its row, claimed again, must not be applied again while it runs: a drainer
// never applies one row twice at the same time.
type inFlight struct {
	mu   sync.Mutex
	rows map[int64]chan struct{} // closed when that apply returns
	// freed is signalled (without blocking) whenever an apply returns: the lock-mode loop waits on
	// it when every apply slot is held by an apply its batch gave up on.
	freed chan struct{}
}

func newInFlight() *inFlight {
	return &inFlight{rows: map[int64]chan struct{}{}, freed: make(chan struct{}, 1)}
}

// begin marks id as applying; false when it already is.
func (f *inFlight) begin(id int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, running := f.rows[id]; running {
		return false
	}
	f.rows[id] = make(chan struct{})
	return true
}

// end unmarks id, whose apply returned.
func (f *inFlight) end(id int64) {
	f.mu.Lock()
	if done, running := f.rows[id]; running {
		close(done)
		delete(f.rows, id)
	}
	f.mu.Unlock()
	select {
	case f.freed <- struct{}{}:
	default:
	}
}

// done returns a channel that is closed when the apply of id running now returns, nil when none
// runs.
func (f *inFlight) done(id int64) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rows[id]
}

// count is how many applies are running.
func (f *inFlight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.rows)
}
