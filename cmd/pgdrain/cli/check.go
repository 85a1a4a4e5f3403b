package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgdrain/pgdrain/internal/console/timetext"
	"github.com/pgdrain/pgdrain/internal/headsrebuild"
)

// finding is one problem found by check.
type finding struct {
	// Check is the area: "columns", "indexes", "autovacuum", "triggers", "constraints", "sequence",
	// "key type", "row security", "prepared transactions" or "repair".
	Check   string  `json:"check"`
	Problem string  `json:"problem"`
	Name    *string `json:"name"`
	Detail  string  `json:"detail"`
}

// maxScaleFactor is the largest autovacuum scale factor check accepts on a queue table. A queue
// table is small and churns; the cluster defaults (0.1 to 0.2 of the table) leave the planner on
// statistics taken when the queue was empty for far too long (see docs/operations.md).
const maxScaleFactor = 0.05

var queueScaleFactors = []string{
	"autovacuum_vacuum_scale_factor",
	"autovacuum_analyze_scale_factor",
	"autovacuum_vacuum_insert_scale_factor",
}

var checkCommand = command{
	name: "check", minArgs: 1, maxArgs: 1,
	bind: noFlags(func(ctx context.Context, e env, args []string) error {
		queue := args[0]
		findings, err := checkIndexes(ctx, e.conn, queue)
		if err != nil {
			return err
		}
		t, err := readQueueTable(ctx, e.conn, queue)
		if err != nil {
			return err
		}
		av, err := checkTableAutovacuum(ctx, e.conn, t)
		if err != nil {
			return err
		}
		findings = append(findings, av...)
		tg, err := checkTriggers(ctx, e.conn, t.name, t.oid, t.partitioned)
		if err != nil {
			return err
		}
		findings = append(findings, tg...)
		var skips []skipped
		for _, c := range []func(context.Context, *pgx.Conn, queueTable) ([]finding, *skipped, error){checkColumns, checkConstraints, checkSequence, checkKeyType, checkRowSecurity, checkPrepared} {
			list, skip, err := c(ctx, e.conn, t)
			if err != nil {
				return err
			}
			findings = append(findings, list...)
			if skip != nil {
				skips = append(skips, *skip)
			}
		}
		rebuild, err := checkHeadsRebuild(ctx, e.conn, t.name)
		if err != nil {
			return err
		}
		if hidden := rowSecurityFound(findings); hidden != nil {
			skips = append(skips, *hidden)
		} else if rebuild != nil {
			skips = append(skips, *rebuild)
		} else {
			rp, err := checkRepair(ctx, e.conn, t.name)
			if err != nil {
				return err
			}
			findings = append(findings, rp...)
		}

		if e.json {
			if findings == nil {
				findings = []finding{}
			}
			if skips == nil {
				skips = []skipped{}
			}
			if err := writeJSON(e.out, map[string]any{"queue": queue, "table": t.name, "ok": len(findings) == 0, "problems": findings, "skipped": skips}); err != nil {
				return err
			}
		} else {
			if len(findings) == 0 {
				reach := ", and a claim can reach every pending row"
				if rebuild != nil {
					reach = ""
				}
				fmt.Fprintf(e.out, "ok: %s has %s%s\n", t.name, checkedText(skips, t.partitioned), reach)
			} else {
				rows := make([][]string, len(findings))
				for i, f := range findings {
					rows[i] = []string{f.Check, f.Problem, orDash(f.Name), f.Detail}
				}
				if err := writeTable(e.out, []string{"CHECK", "PROBLEM", "NAME", "DETAIL"}, rows); err != nil {
					return err
				}
			}
			for _, s := range skips {
				fmt.Fprintf(e.out, "not checked: %s: %s\n", s.Check, terminalSafe(s.Detail))
			}
		}
		if len(findings) > 0 {
			return problemsFound
		}
		return nil
	}),
}

// queueTable is the queue's table as check reads it.
type queueTable struct {
	name        string // the queue (outbox.queues.queue)
	oid         uint32
	ident       string // the table as SQL names it: schema-qualified, quoted where needed
	sequence    string // the id sequence (outbox.queues.id_sequence), as ident; "" when there is none
	partitioned bool
	reloptions  []string
	rangeParent bool // a partitioned table (PARTITION BY RANGE (id)): its leaves hold the rows
}

// readQueueTable reads the queue's registration. Its table and sequence come back as regclass
// text, which quotes what needs quoting and, under the pinned search_path, names the schema.
func readQueueTable(ctx context.Context, conn *pgx.Conn, queue string) (queueTable, error) {
	var t queueTable
	err := conn.QueryRow(ctx, `
		SELECT q.queue, q.table_oid::oid, q.table_oid::text, COALESCE(q.id_sequence::text, ''),
		       q.partition_column IS NOT NULL, COALESCE(c.reloptions, '{}'), c.relkind = 'p'
		FROM outbox.queues q JOIN pg_catalog.pg_class c ON c.oid = q.table_oid
		WHERE q.queue = CASE WHEN strpos($1, '.') > 0 THEN lower($1) ELSE 'public.' || lower($1) END`,
		queue).Scan(&t.name, &t.oid, &t.ident, &t.sequence, &t.partitioned, &t.reloptions, &t.rangeParent)
	if err != nil {
		return t, fmt.Errorf("reading the queue's table: %w", err)
	}
	return t, nil
}

// checkedText lists what check verified, leaving out what it skipped, for the "ok" line.
func checkedText(skips []skipped, partitioned bool) string {
	parts := []string{"its columns of pgdrain's types and defaults", "exactly the required indexes", fmt.Sprintf("autovacuum scale factors <= %g", maxScaleFactor), "its triggers"}
	skippedCheck := map[string]bool{}
	for _, s := range skips {
		skippedCheck[s.Check] = true
	}
	if !skippedCheck[checkConstraintsName] {
		parts = append(parts, "no CHECK a pending row breaks")
	}
	if !skippedCheck[checkSequenceName] {
		parts = append(parts, "an id sequence ahead of its ids")
	}
	parts = append(parts, "no row level security hiding rows from pgdrain", "no prepared transaction holding it")
	if partitioned && !skippedCheck[checkKeyTypeName] {
		parts = append(parts, "a partition key with one text per value")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

func checkIndexes(ctx context.Context, conn *pgx.Conn, queue string) ([]finding, error) {
	rows, err := conn.Query(ctx, `SELECT c.problem, c.index_name, c.detail FROM outbox.check_indexes($1) c`, queue)
	if err != nil {
		return nil, fmt.Errorf("checking indexes: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (finding, error) {
		f := finding{Check: "indexes"}
		err := r.Scan(&f.Problem, &f.Name, &f.Detail)
		f.Detail = timetext.Rewrite(f.Detail)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("checking indexes: %w", err)
	}
	return list, nil
}

// checkHeadsRebuild returns the repair check as skipped while claims rebuild the queue's partition
// heads after a crash, a promotion or a restore without the unlogged tables' data
// (outbox.heads_rebuild): outbox.repair checks nothing until the last part, so its empty dry run
// would vouch for keys that wait for their part. nil when the heads are complete, and on a schema
// before outbox.heads_rebuild (00051), whose repair is checked as before.
func checkHeadsRebuild(ctx context.Context, conn *pgx.Conn, table string) (*skipped, error) {
	progress, err := headsRebuild(ctx, conn, table)
	if err != nil || progress == "" {
		return nil, err
	}
	return &skipped{Check: "repair", Detail: fmt.Sprintf("claims are rebuilding the partition heads, a part "+
		"per claim, after a crash, a promotion or a restore without the unlogged tables (%s); keys no part "+
		"has reached wait for their part, and outbox.repair checks nothing until the last one. Run check "+
		"again once a drainer has claimed for a while", progress)}, nil
}

// rowSecurityFound returns the repair check as skipped when check found row level security that
// applies to the owner of pgdrain's functions: outbox.repair then fails (42501), as every claim
// does, rather than look at the rows the policy shows (migration 00053).
func rowSecurityFound(findings []finding) *skipped {
	for _, f := range findings {
		if f.Check == checkRowSecurityName {
			return &skipped{Check: "repair", Detail: "row level security applies to the role pgdrain's functions run " +
				"as (above): outbox.repair fails, as every claim does, until it no longer applies"}
		}
	}
	return nil
}

// headsRebuild says how far claims are in rebuilding the queue's partition heads
// (headsrebuild.Read): "no part done yet" or "done through key ...", and "" when they are not
// rebuilding them, or on a schema before 00051 or a hot standby, which can not say.
func headsRebuild(ctx context.Context, conn *pgx.Conn, queue string) (string, error) {
	p, _, err := headsrebuild.Read(ctx, conn, queue)
	if err != nil {
		return "", fmt.Errorf("asking whether the partition heads are being rebuilt: %w", err)
	}
	if p == nil {
		return "", nil
	}
	return p.String(), nil
}

// checkRepair dry-runs outbox.repair: pending deliverable rows that no claim can reach because the
// derived state (partition heads, floors, parks) disagrees with the queue table. It changes nothing.
// The Go drainer's repair pass fixes them (Config.RepairInterval); a finding here that does not go
// away is a bug worth reporting. A repair running right now in another session makes it report
// nothing: run check again.
func checkRepair(ctx context.Context, conn *pgx.Conn, table string) ([]finding, error) {
	rows, err := conn.Query(ctx, `
		SELECT r.partition_key, r.cause, r.head_id, r.detail FROM outbox.repair($1, dry_run => true) r`, table)
	if err != nil {
		return nil, fmt.Errorf("dry-running outbox.repair: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (finding, error) {
		f := finding{Check: "repair"}
		var headID *int64
		var detail *string
		err := r.Scan(&f.Name, &f.Problem, &headID, &detail)
		head := "no head"
		if headID != nil {
			head = "head " + strconv.FormatInt(*headID, 10)
		}
		f.Detail = fmt.Sprintf("%s (%s): no claim reaches it; a drainer's repair pass fixes it, or "+
			"SELECT * FROM outbox.repair('%s'); please report it as a pgdrain bug", timetext.Rewrite(orDash(detail)), head, table)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("dry-running outbox.repair: %w", err)
	}
	return list, nil
}

// checkTableAutovacuum checks the queue table's autovacuum settings, or, for a partitioned table
// (PostgreSQL refuses autovacuum settings on the parent: "unrecognized parameter"), each of its
// leaf partitions', which hold the rows and are what autovacuum visits.
func checkTableAutovacuum(ctx context.Context, conn *pgx.Conn, t queueTable) ([]finding, error) {
	if !t.rangeParent {
		return checkAutovacuum(ctx, conn, t.ident, t.reloptions)
	}
	rows, err := conn.Query(ctx, `
		SELECT p.relid::regclass::text, COALESCE(c.reloptions, '{}')
		FROM pg_catalog.pg_partition_tree($1::oid::regclass) p JOIN pg_catalog.pg_class c ON c.oid = p.relid
		WHERE p.isleaf ORDER BY 1`, t.oid)
	if err != nil {
		return nil, fmt.Errorf("reading the partitions of %s: %w", t.ident, err)
	}
	type leaf struct {
		ident      string
		reloptions []string
	}
	leaves, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (leaf, error) {
		var l leaf
		err := r.Scan(&l.ident, &l.reloptions)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the partitions of %s: %w", t.ident, err)
	}
	var out []finding
	for _, l := range leaves {
		f, err := checkAutovacuum(ctx, conn, l.ident, l.reloptions)
		if err != nil {
			return nil, err
		}
		out = append(out, f...)
	}
	return out, nil
}

// checkAutovacuum checks one table's autovacuum settings (table: as SQL names it, for the advice).
func checkAutovacuum(ctx context.Context, conn *pgx.Conn, table string, reloptions []string) ([]finding, error) {
	opts := map[string]string{}
	for _, o := range reloptions {
		k, v, _ := strings.Cut(o, "=")
		opts[k] = v
	}
	var out []finding
	if v, ok := opts["autovacuum_enabled"]; ok && isFalse(v) {
		out = append(out, finding{Check: "autovacuum", Problem: "disabled", Name: ptr("autovacuum_enabled"),
			Detail: "autovacuum_enabled=" + v + " on " + table + ": dead rows and stale statistics accumulate; ALTER TABLE " + table + " RESET (autovacuum_enabled)"})
	}
	for _, name := range queueScaleFactors {
		v, ok := opts[name]
		if !ok {
			var cluster string
			if err := conn.QueryRow(ctx, `SELECT pg_catalog.current_setting($1)`, name).Scan(&cluster); err != nil {
				return nil, fmt.Errorf("reading %s: %w", name, err)
			}
			out = append(out, finding{Check: "autovacuum", Problem: "not set", Name: ptr(name),
				Detail: fmt.Sprintf("the cluster default %s applies to %s; set it on the table to %g or less (ALTER TABLE %s SET (%s = 0.01))", cluster, table, maxScaleFactor, table, name)})
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f > maxScaleFactor {
			out = append(out, finding{Check: "autovacuum", Problem: "too lazy", Name: ptr(name),
				Detail: fmt.Sprintf("%s=%s on %s; a queue table wants %g or less (ALTER TABLE %s SET (%s = 0.01))", name, v, table, maxScaleFactor, table, name)})
		}
	}
	return out, nil
}

func checkTriggers(ctx context.Context, conn *pgx.Conn, table string, tableOID uint32, partitioned bool) ([]finding, error) {
	// A partitioned queue's commit step sends its NOTIFY; only an unpartitioned one has the trigger.
	want := map[string]string{"pgdrain_notify": "NOTIFY on insert, which wakes the drainers"}
	if partitioned {
		want = map[string]string{
			"pgdrain_heads":     "notes the keys each statement writes and queues the commit step",
			"pgdrain_snapshot":  "makes commits keep the key clocks REPEATABLE READ and SERIALIZABLE producers read",
			"pgdrain_key_fixed": "refuses to move an unsent event to another key, which would take it out of its key's order",
		}
	}
	// The key-fixed trigger came with 00042: a schema before it has none to find (goose-run up).
	var keyFixed bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regprocedure('outbox.tg_queue__key_fixed()') IS NOT NULL`).Scan(&keyFixed); err != nil {
		return nil, fmt.Errorf("reading the schema's functions: %w", err)
	}
	if !keyFixed {
		delete(want, "pgdrain_key_fixed")
	}
	var out []finding
	for _, name := range []string{"pgdrain_notify", "pgdrain_heads", "pgdrain_snapshot", "pgdrain_key_fixed"} {
		why, ok := want[name]
		if !ok {
			continue
		}
		var enabled string
		err := conn.QueryRow(ctx, `
			SELECT t.tgenabled::text FROM pg_catalog.pg_trigger t
			WHERE t.tgrelid = $1 AND t.tgname = $2 AND NOT t.tgisinternal`, tableOID, name).Scan(&enabled)
		switch {
		case err == pgx.ErrNoRows:
			out = append(out, finding{Check: "triggers", Problem: "missing", Name: ptr(name),
				Detail: fmt.Sprintf("trigger %s on %s is missing (%s); call outbox.create_queue again to restore it", name, table, why)})
		case err != nil:
			return nil, fmt.Errorf("reading triggers: %w", err)
		case enabled == "D":
			out = append(out, finding{Check: "triggers", Problem: "disabled", Name: ptr(name),
				Detail: fmt.Sprintf("trigger %s on %s is disabled (%s); ALTER TABLE %s ENABLE TRIGGER %s", name, table, why, table, name)})
		}
	}
	if partitioned {
		var enabled string
		err := conn.QueryRow(ctx, `
			SELECT t.tgenabled::text FROM pg_catalog.pg_trigger t
			WHERE t.tgrelid = 'outbox.commit_hooks'::regclass AND t.tgname = 'pgdrain_commit'`).Scan(&enabled)
		switch {
		case err == pgx.ErrNoRows:
			out = append(out, finding{Check: "triggers", Problem: "missing", Name: ptr("outbox.pgdrain_commit"),
				Detail: "the commit step's trigger pgdrain_commit on outbox.commit_hooks is missing: per-key commit order and partition heads of new keys depend on it; migrate outbox down to 18 and up again"})
		case err != nil:
			return nil, fmt.Errorf("reading triggers: %w", err)
		case enabled == "D":
			out = append(out, finding{Check: "triggers", Problem: "disabled", Name: ptr("outbox.pgdrain_commit"),
				Detail: "the commit step's trigger is disabled: ALTER TABLE outbox.commit_hooks ENABLE TRIGGER pgdrain_commit"})
		}
	}
	return out, nil
}

func isFalse(v string) bool {
	switch strings.ToLower(v) {
	case "false", "off", "no", "0":
		return true
	}
	return false
}

func ptr(s string) *string { return &s }
