package console

import (
	"context"
	"net/http"
	"time"
)

// queryTimeout bounds the reads of one page: a page that can not be read quickly says so.
const queryTimeout = 10 * time.Second

type queuesBody struct {
	Queues []QueueView
	// SampledAt is when the newest figures shown were read.
	SampledAt time.Time
	// Stale says which figures are not live, since when and why (none: all are).
	Stale []string
	// Attention names the queues with a problem ("" when none has one).
	Attention   string
	WedgedAfter time.Duration
	// ReadDeadline is how long the sampler waits for one pass's reads.
	ReadDeadline time.Duration
}

func (s *Server) queuesPage(w http.ResponseWriter, r *http.Request) {
	views, st := s.sampler.overview()
	b := queuesBody{Queues: views, SampledAt: st.At, Stale: st.Stale, Attention: attention(views),
		WedgedAfter: s.cfg.WedgedAfter, ReadDeadline: s.sampler.timeout}
	s.render(w, r, http.StatusOK, "queues", pageData{Title: "Queues", Nav: "queues", Live: true, Body: b})
}

type queueBody struct {
	Q           QueueView
	WedgedAfter time.Duration
	Poisoned    []Poisoned
	PoisonedErr string
	// PayloadHidden: the reader's login may not select the payload column (pgdrain_reader and
	// pgdrain_operator may not), so the rows come without previews.
	PayloadHidden bool
	Limit         int
	PoisonedKeys  []string // distinct keys of the listed rows, for "requeue all of a key"
	// Actions are the newest operator actions on the queue (outbox.operator_log); ActionCounts
	// counts the ActionsTotal read by kind; ActionsMore: the queue has more than were read.
	Actions      []OperatorAction
	ActionCounts []ActionCount
	ActionsTotal int
	ActionsMore  bool
	ActionsErr   string
}

func (s *Server) queuePage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("queue")
	v, reg, ok := s.sampler.view(name)
	if !ok {
		s.message(w, r, http.StatusNotFound, "No such queue", "No queue named "+name+" is registered (outbox.queues).", "/")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	// The wedged partitions come from the sampler, like the figures they explain (and the sampler
	// reads a queue again after an action on it).
	b := queueBody{Q: v, WedgedAfter: s.cfg.WedgedAfter, Limit: listLimit}
	release, ok := s.readSlot(ctx)
	if !ok {
		s.message(w, r, http.StatusServiceUnavailable, "Busy", "Every connection of the console's reader pool was busy for "+human(queryTimeout)+": reload in a moment.", "/")
		return
	}
	defer release()
	payload, err := payloadVisible(ctx, s.cfg.Reader, reg)
	if err == nil {
		b.PayloadHidden = !payload
		b.Poisoned, err = readPoisoned(ctx, s.cfg.Reader, reg)
	}
	if err != nil {
		b.PoisonedErr = describe(err)
	}
	seen := map[string]bool{}
	for _, p := range b.Poisoned {
		if p.PartitionKey != nil && !seen[*p.PartitionKey] {
			seen[*p.PartitionKey] = true
			b.PoisonedKeys = append(b.PoisonedKeys, *p.PartitionKey)
		}
	}
	if b.Actions, b.ActionCounts, b.ActionsTotal, b.ActionsMore, err = readOperatorLog(ctx, s.cfg.Reader, name); err != nil {
		b.ActionsErr = describe(err)
	}
	s.render(w, r, http.StatusOK, "queue", pageData{Title: name, Nav: "queues", Live: true, Body: b})
}

type escalationsBody struct {
	Installed bool
	Ladders   []Ladder
	Err       string
	Limit     int
	// Engines are the escalation engines connected now (EnginesErr: why that is unknown).
	Engines    []EngineSession
	EnginesErr string
	// LastDelivery is the newest row of the delivery journal (nil: none yet).
	LastDelivery *Delivery
	// Overdue counts the ladders whose next step is overdue; OverdueAfter is how late a step may
	// be while an engine is connected.
	Overdue      int
	OverdueAfter time.Duration
	Now          time.Time
	// AckInstalled: alr is at 00006 or later. Acknowledged are the firing alerts someone
	// acknowledged; Resolved the recently resolved alerts (alr.resolved_alerts).
	AckInstalled bool
	Acknowledged []AckedAlert
	Resolved     []AckedAlert
	ResolvedMax  int
}

func (s *Server) escalationsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	b := escalationsBody{Limit: listLimit, OverdueAfter: s.cfg.WedgedAfter, Now: time.Now()}
	release, free := s.readSlot(ctx)
	if !free {
		s.message(w, r, http.StatusServiceUnavailable, "Busy", "Every connection of the console's reader pool was busy for "+human(queryTimeout)+": reload in a moment.", "/")
		return
	}
	defer release()
	ok, err := alrInstalled(ctx, s.cfg.Reader)
	if err == nil && ok {
		b.Installed = true
		b.Ladders, err = readLadders(ctx, s.cfg.Reader)
	}
	if err != nil {
		b.Err = describe(err)
	}
	if b.Installed {
		engines, err := readEngines(ctx, s.cfg.Reader)
		if err != nil {
			b.EnginesErr = describe(err)
		}
		b.Engines = engines
		if b.LastDelivery, err = readLastDelivery(ctx, s.cfg.Reader); err != nil && b.Err == "" {
			b.Err = describe(err)
		}
		if b.AckInstalled, err = ackInstalled(ctx, s.cfg.Reader); err == nil && b.AckInstalled {
			b.ResolvedMax = resolvedShown
			if b.Acknowledged, err = readAcknowledged(ctx, s.cfg.Reader); err == nil {
				b.Resolved, err = readResolved(ctx, s.cfg.Reader)
			}
		}
		if err != nil && b.Err == "" {
			b.Err = describe(err)
		}
		now, noEngine := b.Now, len(b.Engines) == 0 && b.EnginesErr == ""
		for i := range b.Ladders {
			l := &b.Ladders[i]
			if l.NextAt == nil || l.NextAt.After(now) {
				continue
			}
			l.Late = now.Sub(*l.NextAt)
			held := l.LeasedUntil != nil && l.LeasedUntil.After(now)
			l.LeaseLapsed = l.LeasedUntil != nil && !held
			l.Overdue = noEngine || (!held && l.Late > s.cfg.WedgedAfter)
			if l.Overdue {
				b.Overdue++
			}
		}
	}
	s.render(w, r, http.StatusOK, "escalations", pageData{Title: "Escalations", Nav: "escalations", Live: true, Body: b})
}
