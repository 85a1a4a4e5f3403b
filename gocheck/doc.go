// Package gocheck holds pgdrain's integration checks against a real PostgreSQL: drift between
// migrations and sql/functions, concurrency, plans, replicas and faults. Every test gets its own
// database from internal/testdb.
package gocheck
