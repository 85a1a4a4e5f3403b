// Package console is the operator console served by `pgdrain web`: server-rendered pages
// (html/template, assets embedded, readable without JavaScript) for the queues, one queue and the
// escalation ladders, and operator actions (requeue, purge, resolve) that call the same SQL
// functions as the pgdrain CLI.
//
// What is wrong is pointed at (problems.go): a queue's wedged keys (a head held by a lease, failing,
// or ready and not taken), ready rows nothing delivers, poisoned rows; "ready" leaves out the rows
// blocked behind wedged heads. An action's page says whether it changed anything and which figures
// moved. The escalations page says whether an engine is connected (pg_stat_activity,
// escalation.ApplicationName) and highlights overdue ladders.
//
// Cost: one background sampler calls outbox.stats for every queue once per Config.Refresh, whatever
// the number of viewers, and outbox.wedged_partitions (with a limit) for a partitioned queue whose
// oldest pending row is older than Config.WedgedAfter; pages read its samples from memory. The
// queue page's poisoned rows go through the claim index with a LIMIT, so leaving a page open on a
// deep queue does not scan the backlog per refresh.
//
// Security: pages read through Config.Reader, actions go through Config.Operator (nil in read-only
// mode, where every POST is refused with 403). Every action is a POST carrying a CSRF token, shows
// a confirmation first, and is logged with who asked and what it changed. See docs/console.md and
// docs/security.md.
package console
