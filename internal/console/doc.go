// Package console is the operator console served by `pgdrain web`: server-rendered pages
// (html/template, assets embedded, readable without JavaScript) for the queues, one queue and the
// escalation ladders, and operator actions (requeue, purge, resolve) that call the same SQL
// functions as the pgdrain CLI.
//
// Cost: one background sampler calls outbox.stats for every queue once per Config.Refresh, whatever
// the number of viewers; pages read its samples from memory. The queue page's lists are bounded
// (outbox.wedged_partitions with a limit, poisoned rows through the claim index with a LIMIT), so
// leaving a page open on a deep queue does not scan the backlog per refresh.
//
// Security: pages read through Config.Reader, actions go through Config.Operator (nil in read-only
// mode, where every POST is refused with 403). Every action is a POST carrying a CSRF token, shows
// a confirmation first, and is logged with who asked and what it changed. See docs/console.md and
// docs/security.md.
package console
