package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	checkRowSecurityName = "row security"
	checkPreparedName    = "prepared transactions"
)

// checkRowSecurity reports row level security on the queue table that applies to the role pgdrain's
// SECURITY DEFINER functions run as (the owner of outbox.claim_batch): FORCE ROW LEVEL SECURITY, or
// RLS on a table of a role it is not a member of, unless it is a superuser or has BYPASSRLS. Every
// claim, result, stats and repair then reads only the rows the policy shows the caller's session:
// the others are never delivered and counted nowhere. create_queue refuses such a table for a new
// queue since 00052 (outbox._row_security_problem); this finds it on a table changed since.
func checkRowSecurity(ctx context.Context, conn *pgx.Conn, t queueTable) ([]finding, *skipped, error) {
	var forced bool
	var definer, owner string
	err := conn.QueryRow(ctx, `
		SELECT c.relforcerowsecurity, pg_catalog.pg_get_userbyid(p.proowner), pg_catalog.pg_get_userbyid(c.relowner)
		FROM pg_catalog.pg_class c, pg_catalog.pg_proc p, pg_catalog.pg_roles r
		WHERE c.oid = $1 AND p.oid = 'outbox.claim_batch(text,integer,interval)'::pg_catalog.regprocedure
		  AND r.oid = p.proowner AND c.relrowsecurity AND NOT (r.rolsuper OR r.rolbypassrls)
		  AND (c.relforcerowsecurity OR NOT pg_catalog.pg_has_role(p.proowner, c.relowner, 'USAGE'))`,
		t.oid).Scan(&forced, &definer, &owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the queue table's row level security: %w", err)
	}
	why, fix := "FORCE ROW LEVEL SECURITY", "NO FORCE ROW LEVEL SECURITY"
	if !forced {
		why, fix = "the table is owned by "+owner, "DISABLE ROW LEVEL SECURITY (or give it to "+definer+")"
	}
	return []finding{{Check: checkRowSecurityName, Problem: "applies to pgdrain", Name: ptr(t.ident), Detail: fmt.Sprintf(
		"%s has row level security that applies to %s, the role pgdrain's functions run as (%s): claims, results, stats "+
			"and repair see only the rows its policies show the caller's session, and the others are never delivered and "+
			"counted nowhere; ALTER TABLE %s %s", t.ident, definer, why, t.ident, fix)}}, nil, nil
}

// preparedHoldsAfter is how long a prepared transaction may hold locks on a queue's table or
// pgdrain's own tables before check names it.
const preparedHoldsAfter = 10 * time.Second

// checkPrepared reports prepared transactions (PREPARE TRANSACTION, two-phase commit) older than
// preparedHoldsAfter that hold locks on the queue table or on pgdrain's tables: until COMMIT
// PREPARED or ROLLBACK PREPARED, a lock-mode batch prepared so holds its rows and their keys (no
// claim takes them, and wedged_partitions calls them ready), a producer's prepared commit step
// holds its keys' commit locks (later producers of those keys wait at COMMIT), and a claim that was
// rebuilding the heads after a crash holds the rebuild. Such a transaction survives restarts.
func checkPrepared(ctx context.Context, conn *pgx.Conn, t queueTable) ([]finding, *skipped, error) {
	rows, err := conn.Query(ctx, `
		SELECT x.gid, x.owner::text, x.prepared, pg_catalog.date_part('epoch', pg_catalog.now() - x.prepared)
		FROM pg_catalog.pg_prepared_xacts x
		WHERE x.database = pg_catalog.current_database() AND x.prepared < pg_catalog.now() - $2::interval
		  -- Its locks are those of the virtual transaction that holds its transaction id (no pid).
		  AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks me JOIN pg_catalog.pg_locks l ON l.virtualtransaction = me.virtualtransaction
		              WHERE me.locktype = 'transactionid' AND me.transactionid = x.transaction AND me.pid IS NULL
		                AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
		                AND (l.relation = $1 OR l.relation IN (SELECT c.oid FROM pg_catalog.pg_class c
		                                                       WHERE c.relnamespace = 'outbox'::pg_catalog.regnamespace)))
		ORDER BY x.prepared`, t.oid, preparedHoldsAfter)
	if err != nil {
		return nil, nil, fmt.Errorf("reading prepared transactions: %w", err)
	}
	var list []finding
	var gid, owner string
	var at time.Time
	var age float64
	if _, err := pgx.ForEachRow(rows, []any{&gid, &owner, &at, &age}, func() error {
		d := time.Duration(age * float64(time.Second)).Round(time.Second)
		list = append(list, finding{Check: checkPreparedName, Problem: "holds the queue", Name: ptr(gid), Detail: fmt.Sprintf(
			"prepared transaction %q (owner %s, prepared %s ago) holds locks on %s or pgdrain's tables: a lock-mode batch "+
				"prepared so keeps its rows and their keys from every claim, a producer's keys' later producers wait at COMMIT; "+
				"COMMIT PREPARED or ROLLBACK PREPARED it (pg_prepared_xacts)", gid, owner, humanDuration(&d), t.ident)})
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("reading prepared transactions: %w", err)
	}
	return list, nil, nil
}
