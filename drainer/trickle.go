package drainer

import "time"

// trickle paces claims while rows trickle in (Config.TrickleInterval). Only the claiming
// goroutine of a runner touches it.
type trickle struct {
	next time.Time           // no claim before then (zero: claim when woken)
	keys map[string]struct{} // the partitions the last claim found rows of
}

// claimed notes a claim that started at start, asked for asked rows and found jobs: a full claim,
// or one that found a partition the last claim with rows found too (rows wait behind that head),
// is followed at once; any other claim with rows no sooner than TrickleInterval after start. An
// empty claim changes nothing: the pause of the last claim with rows still holds (replicas that
// find each other's rows taken do not poll the queue between them), and what it found is still
// what the next claim is compared with (an empty claim between a busy partition's rows, before
// its head's result was recorded, does not make the next row wait).
func (r *runner[T]) claimed(start time.Time, jobs []*job, asked int) {
	t := &r.trickle
	if r.cfg.TrickleInterval <= 0 || len(jobs) == 0 {
		return
	}
	busy := len(jobs) >= asked
	keys := make(map[string]struct{}, len(jobs))
	for _, j := range jobs {
		if k := j.event.PartitionKey; k != "" {
			if _, again := t.keys[k]; again {
				busy = true
			}
			keys[k] = struct{}{}
		}
	}
	t.keys = keys
	t.next = time.Time{}
	if !busy {
		t.next = start.Add(r.cfg.TrickleInterval)
	}
}

// paced is how long the next claim must wait (0: claim now).
func (r *runner[T]) paced() time.Duration {
	return max(time.Until(r.trickle.next), 0)
}
