// Package cli implements the pgdrain operator command. It is a package (not only package main) so
// that tests and other programs can run the command in-process: Run takes the arguments and the
// output streams and returns the exit code.
//
// Every subcommand is a thin call of a function of the outbox SQL API (outbox.stats,
// outbox.wedged_partitions, outbox.requeue_poisoned, outbox.purge_sent, outbox.check_indexes) or a
// read of the registry outbox.queues and the system catalogs; no rule lives here.
package cli
