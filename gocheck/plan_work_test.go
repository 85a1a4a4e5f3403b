package gocheck

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// planWork measures what the statements inside a function did, not how long they took: auto_explain
// (PostgreSQL's contrib module) reports the executed plan of every statement a call runs, nested
// ones included, as a NOTICE to the client, and planWork adds up over every node of every plan the
// rows it produced and the rows it read and threw away (filters, join filters, rechecks), times its
// loops. A plan that compares every key with every head shows up here as keys squared even when
// all of it happens in memory and touches few buffers.

// planWorkConn connects to db as superuser (LOAD needs it), loads auto_explain so that it reports
// to this connection, then SET ROLE role: the statements measured run with role's privileges.
// The returned function gives the work noted since its last call.
func planWorkConn(t *testing.T, db *testdb.DB, role string) (*pgx.Conn, func() float64) {
	t.Helper()
	conn, plans := explainedConn(t, db, role)
	return conn, func() float64 {
		var w float64
		for _, p := range plans() {
			w += p.Plan.work()
		}
		return w
	}
}

// explainedPlan is one statement as auto_explain reported it.
type explainedPlan struct {
	Query string   `json:"Query Text"`
	Plan  planNode `json:"Plan"`
}

// explainedConn is planWorkConn's connection; the returned function gives the plans of the
// statements it ran since its last call, nested ones included, with their buffers.
func explainedConn(t *testing.T, db *testdb.DB, role string) (*pgx.Conn, func() []explainedPlan) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	var mu sync.Mutex
	var plans []explainedPlan
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		_, plan, ok := strings.Cut(n.Message, "plan:\n")
		if !ok {
			return
		}
		var doc explainedPlan
		if json.Unmarshal([]byte(plan), &doc) != nil {
			return
		}
		mu.Lock()
		plans = append(plans, doc)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, s := range []string{
		"LOAD 'auto_explain'",
		"SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_analyze = on",
		"SET auto_explain.log_timing = off",
		"SET auto_explain.log_buffers = on",
		"SET auto_explain.log_nested_statements = on",
		"SET auto_explain.log_format = json",
		"SET auto_explain.log_level = notice",
		"SET ROLE " + pgx.Identifier{role}.Sanitize(),
	} {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	return conn, func() []explainedPlan {
		mu.Lock()
		defer mu.Unlock()
		p := plans
		plans = nil
		return p
	}
}

// planNode is the part of an EXPLAIN (FORMAT JSON) node planWork reads.
type planNode struct {
	Rows         float64 `json:"Actual Rows"`
	Loops        float64 `json:"Actual Loops"`
	Filtered     float64 `json:"Rows Removed by Filter"`
	JoinFiltered float64 `json:"Rows Removed by Join Filter"`
	Rechecked    float64 `json:"Rows Removed by Index Recheck"`
	// Buffers of the node and every node below it (subplans too; not a data-modifying CTE the
	// statement does not read, which runs on its own).
	SharedHit  float64    `json:"Shared Hit Blocks"`
	SharedRead float64    `json:"Shared Read Blocks"`
	Plans      []planNode `json:"Plans"`
}

// work is rows produced and discarded by n and every node below it (Actual Rows and the removed
// counts are per loop).
func (n planNode) work() float64 {
	w := (n.Rows + n.Filtered + n.JoinFiltered + n.Rechecked) * n.Loops
	for _, c := range n.Plans {
		w += c.work()
	}
	return w
}

// requireWorkPerKeyFlat fails unless the plan work per key at 8,000 keys is within 1.5x of that at
// 1,000 keys (perKey holds both, by key count); what names the measured statement.
func requireWorkPerKeyFlat(t *testing.T, what string, perKey map[int]float64) {
	t.Helper()
	require.LessOrEqual(t, perKey[8000], 1.5*perKey[1000],
		"%s: work per key grew with the number of keys: %.1f per key at 8,000 keys, %.1f at 1,000",
		what, perKey[8000], perKey[1000])
}
