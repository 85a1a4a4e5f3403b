package console

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// queryTimeout bounds the reads of one page: a page that can not be read quickly says so.
const queryTimeout = 10 * time.Second

// overviewPageSize is how many queues the overview lists at once. The overview is fetched every
// --refresh by every open tab: its size follows this, not the number of queues (at 2,000 queues
// with every row and its sparkline it was about 5 MB).
const overviewPageSize = 100

type queuesBody struct {
	// Queues are the queues listed: a page of those the filter keeps.
	Queues []QueueView
	// Total is how many queues are registered, Matching how many the filter keeps (Filter: a part
	// of the name, any case; OnlyAttention: only queues that need attention or whose figures are
	// not live). First and Last number the queues listed among them (1-based).
	Total, Matching, First, Last int
	Filter                       string
	OnlyAttention                bool
	// Prev and Next are the addresses of the pages before and after ("" when none).
	Prev, Next string
	// SampledAt is when the newest figures shown were read.
	SampledAt time.Time
	// Stale says which figures are not live, since when and why (none: all are).
	Stale []string
	// Attention names the queues with a problem ("" when none has one), all of them, not only those
	// listed; AttentionN is how many.
	Attention   string
	AttentionN  int
	WedgedAfter time.Duration
	// ReadDeadline is how long the sampler waits for one pass's reads.
	ReadDeadline time.Duration
}

// PageSize is how many queues a page of the overview lists (overviewPageSize).
func (queuesBody) PageSize() int { return overviewPageSize }

// Findable reports whether the overview offers to find queues by name: when they do not fit one page,
// or a filter is on.
func (b queuesBody) Findable() bool {
	return b.Total > overviewPageSize || b.Filter != "" || b.OnlyAttention
}

// Paged reports whether the overview lists only a part of the queues (then it says which).
func (b queuesBody) Paged() bool {
	return b.Matching > len(b.Queues) || b.Filter != "" || b.OnlyAttention
}

func (s *Server) queuesPage(w http.ResponseWriter, r *http.Request) {
	views, st := s.sampler.overview()
	b := queuesBody{Total: len(views), SampledAt: st.At, Stale: st.Stale, WedgedAfter: s.cfg.WedgedAfter, ReadDeadline: s.sampler.timeout}
	b.Attention, b.AttentionN = attention(views)
	query := r.URL.Query()
	b.Filter = strings.TrimSpace(query.Get("q"))
	b.OnlyAttention = query.Get("attention") != ""
	kept := views
	if b.Filter != "" || b.OnlyAttention {
		kept = nil
		part := strings.ToLower(b.Filter)
		for _, v := range views {
			if strings.Contains(strings.ToLower(v.Name), part) && (!b.OnlyAttention || len(v.Problems) > 0 || v.Stale != "") {
				kept = append(kept, v)
			}
		}
	}
	b.Matching = len(kept)
	pages := max(1, (len(kept)+overviewPageSize-1)/overviewPageSize)
	page, err := strconv.Atoi(query.Get("page"))
	if err != nil || page < 1 {
		page = 1
	}
	page = min(page, pages) // a page past the end (queues dropped since the link was made): the last
	start := (page - 1) * overviewPageSize
	b.Queues = kept[start:min(len(kept), start+overviewPageSize)]
	b.First, b.Last = min(start+1, len(kept)), start+len(b.Queues)
	link := func(p int) string {
		q := url.Values{}
		if b.Filter != "" {
			q.Set("q", b.Filter)
		}
		if b.OnlyAttention {
			q.Set("attention", "1")
		}
		if p > 1 {
			q.Set("page", strconv.Itoa(p))
		}
		if len(q) == 0 {
			return "/"
		}
		return "/?" + q.Encode()
	}
	if page > 1 {
		b.Prev = link(page - 1)
	}
	if page < pages {
		b.Next = link(page + 1)
	}
	s.sampler.sparklines(b.Queues, overviewSparkPoints)
	s.render(w, r, http.StatusOK, "queues", pageData{Title: "Queues", Nav: "queues", Live: true, Body: b})
}

// poisonedKey is a key of the listed poisoned rows and the newest listed row of it: "requeue all of
// a key" names the key by that row (key_of), since a key may be longer than a form may be.
type poisonedKey struct {
	Key string
	Row int64
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
	PoisonedKeys  []poisonedKey // distinct keys of the listed rows, for "requeue all of a key"
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
	v, reg, ok := s.sampler.view(name, queueSparkPoints)
	if !ok {
		if why := s.sampler.unknownQueue(name); why != "" {
			s.message(w, r, http.StatusServiceUnavailable, "Queues not readable", why, "/")
			return
		}
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
	// A queue whose table is gone has no rows to list (and no action is offered on it); its
	// operator log is history and stays.
	if !v.Gone {
		payload, err := payloadVisible(ctx, s.cfg.Reader, reg)
		if err == nil {
			b.PayloadHidden = !payload
			b.Poisoned, err = readPoisoned(ctx, s.cfg.Reader, reg)
		}
		if err != nil {
			b.PoisonedErr = describe(err)
		}
	}
	var err error
	seen := map[string]bool{}
	for _, p := range b.Poisoned {
		if p.PartitionKey != nil && !seen[*p.PartitionKey] {
			seen[*p.PartitionKey] = true
			b.PoisonedKeys = append(b.PoisonedKeys, poisonedKey{Key: *p.PartitionKey, Row: p.ID})
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
