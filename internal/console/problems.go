package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/pgdrain/pgdrain/internal/console/timetext"
)

// Problem is one thing wrong with a queue, in a sentence that says where to look.
type Problem struct {
	// Kind is "stalled" (ready rows no drainer takes), "lease" (a wedged head held by a lease),
	// "failing" (a wedged head backing off), "waiting" (a wedged head that is ready but not
	// taken), "rebuilding" (claims rebuild the partition heads: keys wait for their part),
	// "poisoned", "error" (the queue could not be read) or "gone" (its table no longer exists).
	Kind string
	// Text is the sentence shown.
	Text string
}

// maxProblemsOfAKind is how many wedged keys of one kind are named before "and N more".
const maxProblemsOfAKind = 3

// problems lists what is wrong with a queue, most urgent first: rows no drainer takes, leases held
// on wedged keys, wedged keys whose head fails or waits, heads being rebuilt, poisoned rows. A
// healthy queue has none.
func problems(v QueueView, samples []sample, wedgedAfter time.Duration, now time.Time) []Problem {
	var out []Problem
	if v.Gone {
		return []Problem{{"gone", goneText(v, now)}}
	}
	if v.Err != "" {
		since := ""
		if !v.FailingSince.IsZero() {
			since = fmt.Sprintf(" since %s (%s)", timetext.Format(v.FailingSince), fromNow(v.FailingSince, now))
		}
		out = append(out, Problem{"error", "could not be read" + since + ": " + v.Err})
	}
	if v.WedgedErr != "" {
		out = append(out, Problem{"error", "its wedged partitions could not be read: " + v.WedgedErr})
	}
	if v.RebuildErr != "" {
		out = append(out, Problem{"error", "whether its partition heads are being rebuilt could not be read: " + v.RebuildErr})
	}
	if !v.HasStats {
		return out
	}
	if d := stalledFor(samples); d >= wedgedAfter && d > 0 && v.Stats.OldestPendingAge != nil && *v.Stats.OldestPendingAge >= wedgedAfter {
		out = append(out, Problem{"stalled", fmt.Sprintf(
			"no drainer takes its rows: %d ready, none delivered for %s (oldest pending %s): is a drainer running for this queue?",
			v.Ready, human(d), human(*v.Stats.OldestPendingAge))})
	}
	var leased, failing, waiting []Wedged
	for _, w := range v.Wedged {
		switch {
		case w.Leased:
			leased = append(leased, w)
		case w.RetryAt != nil:
			failing = append(failing, w)
		default:
			waiting = append(waiting, w)
		}
	}
	behind := func(w Wedged) string {
		if w.Pending > 1 {
			return fmt.Sprintf("; %d row(s) wait behind it", w.Pending-1)
		}
		return ""
	}
	for i, w := range leased {
		if i == maxProblemsOfAKind {
			out = append(out, Problem{"lease", fmt.Sprintf("and %d more wedged key(s) held by a lease", len(leased)-i)})
			break
		}
		until := "a lease"
		if w.LeasedUntil != nil {
			until = fmt.Sprintf("a lease until %s (%s)", timetext.Format(*w.LeasedUntil), fromNow(*w.LeasedUntil, now))
		}
		out = append(out, Problem{"lease", fmt.Sprintf(
			"key %s: head row %d, pending for %s, is held by %s%s. If its worker is gone, release the lease.",
			shortKey(w.PartitionKey), w.HeadID, human(now.Sub(w.OldestPendingAt)), until, behind(w))})
	}
	for i, w := range failing {
		if i == maxProblemsOfAKind {
			out = append(out, Problem{"failing", fmt.Sprintf("and %d more wedged key(s) whose head keeps failing", len(failing)-i)})
			break
		}
		out = append(out, Problem{"failing", fmt.Sprintf(
			"key %s: head row %d has failed %d time(s) and is pending for %s; next try %s%s.",
			shortKey(w.PartitionKey), w.HeadID, w.HeadAttemptCount, human(now.Sub(w.OldestPendingAt)), fromNow(*w.RetryAt, now), behind(w))})
	}
	for i, w := range waiting {
		if i == maxProblemsOfAKind {
			out = append(out, Problem{"waiting", fmt.Sprintf("and %d more wedged key(s) whose ready head no drainer takes", len(waiting)-i)})
			break
		}
		out = append(out, Problem{"waiting", fmt.Sprintf(
			"key %s: head row %d is ready but no drainer has taken it for %s%s.",
			shortKey(w.PartitionKey), w.HeadID, human(now.Sub(w.OldestPendingAt)), behind(w))})
	}
	if v.Rebuild != nil {
		out = append(out, Problem{"rebuilding", rebuildText(*v.Rebuild)})
	}
	if v.Stats.Poisoned > 0 {
		out = append(out, Problem{"poisoned", fmt.Sprintf(
			"%d poisoned row(s): no drainer will try them again until they are requeued.", v.Stats.Poisoned)})
	}
	return out
}

// rebuildText says that claims are rebuilding a queue's partition heads, how far, and what that
// needs. The key is the queue's data: quoted, as plain text (the page escapes it).
func rebuildText(r HeadsRebuild) string {
	progress := "no part done yet"
	if r.Through != nil {
		progress = "done through key " + quoted(shortKey(*r.Through))
	}
	return fmt.Sprintf("its partition heads are being rebuilt after a crash, a promotion or a restore (%s): keys no part "+
		"has reached wait for their part. Each claim rebuilds one part, so its drainers must be running.", progress)
}

// goneText says that a queue's table no longer exists, since when, and what to do.
func goneText(v QueueView, now time.Time) string {
	since := ""
	if !v.GoneSince.IsZero() {
		since = fmt.Sprintf(" (seen %s, %s)", timetext.Format(v.GoneSince), fromNow(v.GoneSince, now))
	}
	return fmt.Sprintf("its table no longer exists%s: it was dropped outside outbox.drop_queue, and the registry still names "+
		"table oid %d. Nothing can be read of this queue or done to it. Re-create and register the table with "+
		"outbox.create_queue(%s, ...), or unregister the queue with outbox.drop_queue(%s).", since, v.tableOID, sqlLiteral(v.Name), sqlLiteral(v.Name))
}

// sqlLiteral quotes s as an SQL string literal, for SQL shown to a person.
func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// stalledFor is how long a queue has had rows a claim could take (ready and not blocked) in every
// sample up to the last while none was delivered (the estimate of rateOver: inserted minus the
// growth of pending + poisoned), or 0.
func stalledFor(samples []sample) time.Duration {
	n := len(samples)
	if n < 2 {
		return 0
	}
	last := samples[n-1]
	if last.stats.Ready-last.blocked <= 0 {
		return 0
	}
	var since time.Time
	for k := n - 2; k >= 0; k-- {
		a := samples[k]
		ins := last.inserted - a.inserted
		growth := (last.stats.Pending + last.stats.Poisoned) - (a.stats.Pending + a.stats.Poisoned)
		if a.stats.Ready-a.blocked <= 0 || ins < 0 || ins-growth > 0 {
			break
		}
		since = a.at
	}
	if since.IsZero() {
		return 0
	}
	return last.at.Sub(since)
}

// fromNow says when t is from now: "in 1h58m", "now", "5s ago".
func fromNow(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d >= time.Second:
		return "in " + human(d)
	case d <= -time.Second:
		return human(-d) + " ago"
	}
	return "now"
}

// maxAttentionNames is how many queues the overview's summary names before "and N more".
const maxAttentionNames = 10

// attention is the overview's one-line summary of the queues' problems, and how many queues have one.
func attention(views []QueueView) (string, int) {
	var names []string
	for _, v := range views {
		if len(v.Problems) > 0 {
			names = append(names, v.Name)
		}
	}
	n := len(names)
	if n > maxAttentionNames {
		names = append(names[:maxAttentionNames], fmt.Sprintf("and %d more", n-maxAttentionNames))
	}
	switch n {
	case 0:
		return "", 0
	case 1:
		return "1 queue needs attention: " + names[0], 1
	}
	return fmt.Sprintf("%d queues need attention: %s", n, strings.Join(names, ", ")), n
}
