package escalation

import (
	"context"
	"strconv"
	"time"
)

const (
	// unjournaledMigration is the alr migration that added alr.unjournaled_steps: with an older
	// schema Run does not ask.
	unjournaledMigration = 13
	// unjournaledCheckEvery is how often Run asks for steps recorded and never journaled.
	unjournaledCheckEvery = time.Minute
	// unjournaledLogged bounds how many such steps one check logs, one line each.
	unjournaledLogged = 20
)

// unjournaledAfter is how long a step may stay recorded and not journaled while an engine with
// this configuration still delivers and journals it: its lease, its delivery with OverrunGrace and
// the journal's retries, twice over, and at least 10 minutes (engines of one database may be
// configured apart).
func (c Config) unjournaledAfter() time.Duration {
	return max(10*time.Minute, 2*(c.Lease+c.StepTimeout+OverrunGrace))
}

// checkUnjournaled asks for steps that apply_escalation recorded and record_delivery never
// journaled for longer than unjournaledAfter (alr.unjournaled_steps): pages an engine killed
// between recording and delivering probably never sent, which nothing else would show. It sets
// pgdrain_escalation_unjournaled_steps (the whole database's count, the same from every engine)
// and logs each step at Error the first time it finds it. A failed check is logged and changes
// nothing.
func (e *Engine) checkUnjournaled(ctx context.Context) {
	if e.alrMigration.Load() < unjournaledMigration {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
	defer cancel()
	rows, err := e.db.Query(cctx, sqlUnjournaled, e.cfg.unjournaledAfter(), unjournaledLogged)
	if err != nil {
		e.logCheckFailed(ctx, err)
		return
	}
	defer rows.Close()
	type step struct {
		escalationID, alertID, channel, target string
		stepIdx                                int
		since                                  time.Time
	}
	var found []step
	var total int64
	for rows.Next() {
		var s step
		var since int64
		if err := rows.Scan(&s.escalationID, &s.alertID, &s.stepIdx, &s.channel, &s.target, &since, &total); err != nil {
			e.logCheckFailed(ctx, err)
			return
		}
		s.since = time.UnixMicro(since)
		found = append(found, s)
	}
	if err := rows.Err(); err != nil {
		e.logCheckFailed(ctx, err)
		return
	}
	e.metrics.unjournaled.Set(float64(total))
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := make(map[string]bool, len(found))
	for _, s := range found {
		key := s.escalationID + "/" + strconv.Itoa(s.stepIdx)
		seen[key] = true
		if e.unjournaledSeen[key] {
			continue
		}
		e.log.Error("escalation step recorded and never journaled: the engine that took it stopped between recording "+
			"and delivering it (killed?), so it was probably never delivered; page its target by hand if the alert still "+
			"matters (alr.unjournaled_steps lists every such step)", "escalation_id", s.escalationID, "alert_id", s.alertID,
			"step_idx", s.stepIdx, "channel", s.channel, "target", s.target, "recorded_by", s.since, "unjournaled_total", total)
	}
	e.unjournaledSeen = seen
}

func (e *Engine) logCheckFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	e.logRetry("asking for steps recorded and never journaled failed", err, unjournaledCheckEvery)
}
