package drainer

import (
	"fmt"
	"time"
)

// outOfTimeError is a TxApplier call's error when the call returned once its time was up, having
// been given at least half its ApplyTimeout (the end of the batch's transaction may cut the rest):
// whatever it says (a context error, a statement cancelled by it, SQLSTATE 57014; another systemic
// error aside: txRound), it is the rows' failure, not the database's, so it is charged like an
// Applier's timeout rather than rolled back uncharged as a systemic error is.
type outOfTimeError struct {
	err     error
	allowed time.Duration
}

func (e *outOfTimeError) Error() string {
	return fmt.Sprintf("the TxApplier ran out of its time (%s): %v", e.allowed.Round(time.Millisecond), e.err)
}

func (e *outOfTimeError) Unwrap() error { return e.err }

// cutShortError is a TxApplier call's error when the call returned once its time was up but had
// been given less than half its ApplyTimeout (the batch's transaction was nearly over when it
// began: a slow claim, a loaded machine): not the rows' failure. Its rows are not charged; they are
// claimed again.
type cutShortError struct {
	err     error
	allowed time.Duration
}

func (e *cutShortError) Error() string {
	return fmt.Sprintf("the TxApplier's call was cut short by the end of its transaction (given %s): %v",
		e.allowed.Round(time.Millisecond), e.err)
}

func (e *cutShortError) Unwrap() error { return e.err }

// timedOutLimit bounds how many rows timedOut remembers; timedOutKept is how long a row is kept
// once the bound is reached.
const (
	timedOutLimit = 4096
	timedOutKept  = time.Hour
)

// timedOut remembers the rows of TxApplier calls that ran out of their time, by id, until a call of
// the row alone succeeds. A batch with such a row is applied one row at a time (isolate) instead
// of in one call: otherwise the row that hangs uses up the whole batch's time again on every claim,
// with no time left to apply its rows one at a time, and since no row is reached none is charged
// an attempt, so the queue stops for ever (only a row's own call that runs out of time is charged).
// A row whose own call ran out of time and lost the transaction with it (a statement interrupted
// by its context closes pgx's connection; a call given up on) could not be charged in it: its next
// claim records that failure without calling the TxApplier, and the claim after that tries it
// again. Used by the lock loop's goroutine only.
type timedOut map[int64]timedOutRow

type timedOutRow struct {
	at   time.Time
	lost error // the failure of the row's own call that lost its transaction, to record at its next claim
}

// ranOut remembers that a call for jobs ran out of its time; lost: and its transaction is lost.
// With several rows it can not tell which one hung: each is applied alone when it comes back.
func (t timedOut) ranOut(jobs []*job, lost bool, err error) {
	now := time.Now()
	for _, j := range jobs {
		row := timedOutRow{at: now}
		if lost && len(jobs) == 1 {
			row.lost = err
		}
		t[j.event.ID] = row
	}
	if len(t) <= timedOutLimit {
		return
	}
	for id, row := range t {
		if now.Sub(row.at) > timedOutKept {
			delete(t, id)
		}
	}
	for id := range t {
		if len(t) <= timedOutLimit {
			return
		}
		delete(t, id)
	}
}

// any tells whether jobs holds a row remembered.
func (t timedOut) any(jobs []*job) bool {
	for _, j := range jobs {
		if _, ok := t[j.event.ID]; ok {
			return true
		}
	}
	return false
}

// takeLost returns the failure that lost j's transaction, if one is waiting to be recorded. It is
// kept until settled sees it committed: a later row of the same claim whose call loses the
// transaction rolls the charge back with it, and the row's next claim must charge it again, not
// call the TxApplier (which would lose that transaction too: the claims then counted in binary over
// a claim's hanging rows).
func (t timedOut) takeLost(j *job) error {
	row, ok := t[j.event.ID]
	if !ok {
		return nil
	}
	return row.lost
}

// settled takes the rows of jobs as committed: it forgets those that were sent or poisoned, and the
// recorded failure of a row that failed again, which is kept (its next claim calls the TxApplier
// for it alone).
func (t timedOut) settled(jobs []*job) {
	for _, j := range jobs {
		row, ok := t[j.event.ID]
		switch {
		case !ok:
		case j.disposition != DispositionTransient:
			delete(t, j.event.ID)
		case row.lost != nil:
			t[j.event.ID] = timedOutRow{at: row.at}
		}
	}
}
