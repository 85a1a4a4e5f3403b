package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// checkColumnsName is the check of the queue's columns.
const checkColumnsName = "columns"

// canonicalColumns are the columns pgdrain's functions read and write, with the types their
// statements are built for (create_queue makes them so).
var canonicalColumns = []struct{ name, typ string }{
	{"id", "bigint"}, {"event_type", "text"}, {"payload", "jsonb"}, {"created_at", "timestamp with time zone"},
	{"attempt_count", "integer"}, {"next_attempt_at", "timestamp with time zone"}, {"sent_at", "timestamp with time zone"},
	{"leased_until", "timestamp with time zone"}, {"lease_token", "uuid"}, {"last_error", "text"},
	{"headers", "jsonb"}, {"event_id", "uuid"},
}

// checkColumns reports a canonical column that is missing or whose type a DBA changed (ALTER
// COLUMN ... TYPE): pgdrain's claims and results are built for create_queue's types, so every
// claim then fails (42804, "structure of query does not match function result type") or results
// are refused, and the queue stalls while the rest of check found nothing wrong. It reads only the
// catalog.
func checkColumns(ctx context.Context, conn *pgx.Conn, t queueTable) ([]finding, *skipped, error) {
	rows, err := conn.Query(ctx, `
		SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
		       pg_catalog.pg_get_expr(d.adbin, d.adrelid)
		FROM pg_catalog.pg_attribute a
		LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`, t.oid)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the queue's columns: %w", err)
	}
	have := map[string]string{}
	notNull := map[string]bool{}
	defaults := map[string]*string{}
	var name, typ string
	var nn bool
	var def *string
	if _, err := pgx.ForEachRow(rows, []any{&name, &typ, &nn, &def}, func() error {
		have[name], notNull[name], defaults[name] = typ, nn, def
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("reading the queue's columns: %w", err)
	}
	var list []finding
	for _, c := range canonicalColumns {
		got, ok := have[c.name]
		switch {
		case !ok:
			list = append(list, finding{Check: checkColumnsName, Problem: "missing", Name: ptr(c.name), Detail: fmt.Sprintf(
				"%s has no column %s (%s): pgdrain's claims and results fail on it; run outbox.create_queue again after adding it",
				t.ident, c.name, c.typ)})
		case got != c.typ:
			list = append(list, finding{Check: checkColumnsName, Problem: "other type", Name: ptr(c.name), Detail: fmt.Sprintf(
				"column %s of %s is %s, pgdrain's statements need %s: every claim fails (SQLSTATE 42804, structure of query "+
					"does not match function result type) or results are refused, and the queue stalls; "+
					"ALTER TABLE %s ALTER COLUMN %s TYPE %s", c.name, t.ident, got, c.typ, t.ident, c.name, c.typ)})
		}
	}
	return append(list, columnDefaultFindings(t, have, notNull, defaults)...), nil, nil
}

// columnDefaultFindings reports a default that writes a new row other than pending and free, as
// create_queue refuses it for a new queue since 00052 (outbox._column_problems): sent_at's writes
// every row as sent (never delivered, counted nowhere), leased_until's or lease_token's as leased,
// and an attempt_count that is not NOT NULL DEFAULT 0 as tried already, or with NULL attempts that
// no claim takes.
func columnDefaultFindings(t queueTable, have map[string]string, notNull map[string]bool, defaults map[string]*string) []finding {
	var list []finding
	for _, c := range []struct{ name, written string }{
		{"sent_at", "as sent: never delivered, counted nowhere"},
		{"leased_until", "as leased"}, {"lease_token", "as leased"},
	} {
		if d := defaults[c.name]; d != nil {
			list = append(list, finding{Check: checkColumnsName, Problem: "default", Name: ptr(c.name), Detail: fmt.Sprintf(
				"column %s of %s has DEFAULT %s: new rows are written %s; ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT",
				c.name, t.ident, *d, c.written, t.ident, c.name)})
		}
	}
	if _, ok := have["attempt_count"]; ok {
		d := defaults["attempt_count"]
		if !notNull["attempt_count"] || d == nil || *d != "0" {
			list = append(list, finding{Check: checkColumnsName, Problem: "default", Name: ptr("attempt_count"), Detail: fmt.Sprintf(
				"column attempt_count of %s is not NOT NULL DEFAULT 0: rows written with NULL attempts are taken by no claim, "+
					"and a larger default writes them as tried already; ALTER TABLE %s ALTER COLUMN attempt_count SET DEFAULT 0, "+
					"ALTER COLUMN attempt_count SET NOT NULL", t.ident, t.ident)})
		}
	}
	return list
}
