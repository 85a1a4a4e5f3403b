package gocheck

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
	"github.com/pgdrain/pgdrain/migrations"
)

// baselineRelease is the name part of the baseline migrations (scripts/fold-baseline.sh): migrations/
// <module>/NNNNN_v0_1_0.sql, numbered as the newest migration of the history it folds.
const baselineRelease = "v0_1_0"

// historyDir is where scripts/fold-baseline.sh moved a module's development migrations.
func historyDir(module string) string { return filepath.Join("..", "sql", "history", module) }

// historyProvider returns a goose provider over module's development history (sql/history/<module>),
// recording into the module's own version table: a database it migrated to the end is at the
// baseline's version, as a database of the development era is.
func historyProvider(t *testing.T, db *sql.DB, module string) *goose.Provider {
	t.Helper()
	m, err := migrations.ModuleByName(module)
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS(historyDir(module)), goose.WithTableName(m.VersionTable))
	require.NoError(t, err, "loading the history of module %s (%s: run scripts/fold-baseline.sh)", module, historyDir(module))
	return p
}

// migrateHistoryTo applies module's development history up to and including migration to on db
// (to 0: all of it). Checks of the development-era upgrades (00002 -> 00003, 00003 -> 00004, ...)
// and of databases older than version() run on it.
func migrateHistoryTo(t *testing.T, db *testdb.DB, module string, to int64) {
	t.Helper()
	sqlDB, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sqlDB.Close()
	p := historyProvider(t, sqlDB, module)
	if to == 0 {
		_, err = p.Up(context.Background())
	} else {
		_, err = p.UpTo(context.Background(), to)
	}
	require.NoError(t, err, "module %s history up to %d", module, to)
}

// migrateTo applies module's migrations (the embedded ones, from its 0.1.0 baseline) up to and
// including migration to on db (to 0: all of them).
func migrateTo(t *testing.T, db *testdb.DB, module string, to int64) {
	t.Helper()
	sqlDB, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sqlDB.Close()
	m, err := migrations.ModuleByName(module)
	require.NoError(t, err)
	p, err := migrations.NewProvider(sqlDB, m)
	require.NoError(t, err)
	if to == 0 {
		_, err = p.Up(context.Background())
	} else {
		_, err = p.UpTo(context.Background(), to)
	}
	require.NoError(t, err, "module %s up to %d", module, to)
}

// baselineVersion is the goose version of module's baseline migration.
func baselineVersion(t *testing.T, module string) int64 {
	t.Helper()
	entries, err := fs.ReadDir(migrations.FS, module)
	require.NoError(t, err)
	for _, e := range entries {
		num, rest, _ := strings.Cut(e.Name(), "_")
		if rest == baselineRelease+".sql" {
			n, err := strconv.ParseInt(num, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("migrations/%s has no baseline *_%s.sql: run scripts/fold-baseline.sh", module, baselineRelease)
	return 0
}

// The 0.1.0 baseline of each module (migrations/<module>/N_v0_1_0.sql) is equal in effect to its
// development history (sql/history/<module>/00001..N): one fresh database applies the history,
// another the baseline only, and every object of schemas outbox, alr and core must agree —
// functions (pg_get_functiondef: body, SECURITY DEFINER, SET clauses; owner and privileges), tables
// (persistence, storage options, row security), columns (position, type, default, NOT NULL,
// identity, generation, collation), constraints (pg_get_constraintdef, validated), indexes
// (pg_get_indexdef), sequences (parameters, owning column), triggers (pg_get_triggerdef, enabled),
// views, types, policies, comments of all of them, privileges of schemas, tables, columns,
// sequences, functions and types (the effective ACL, owner's defaults included) and the database's
// default privileges and extensions. Both end at the same goose version. A difference is printed
// object by object. The baseline must also carry sql/schema/<module>/baseline*.sql as they are
// now: an edit there that was not folded fails here (re-run scripts/fold-baseline.sh).
// The pgdrain_* roles are cluster-wide, so both databases see the same ones: that the baseline
// makes them is shown by the statements it shares with the history (and by every test cluster).
func TestBaseline_EqualsTheHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	history := testdb.NewEmpty(t)
	baseline := testdb.NewEmpty(t)

	historyDB, err := sql.Open("pgx", history.URL)
	require.NoError(t, err)
	defer historyDB.Close()
	baselineDB, err := sql.Open("pgx", baseline.URL)
	require.NoError(t, err)
	defer baselineDB.Close()
	for _, m := range migrations.Modules {
		h := historyProvider(t, historyDB, m.Name)
		_, err := h.Up(ctx)
		require.NoError(t, err, "module %s: applying the history", m.Name)
		b, err := migrations.NewProvider(baselineDB, m)
		require.NoError(t, err)
		want := baselineVersion(t, m.Name)
		_, err = b.UpTo(ctx, want)
		require.NoError(t, err, "module %s: applying the baseline", m.Name)

		hv, err := h.GetDBVersion(ctx)
		require.NoError(t, err)
		bv, err := b.GetDBVersion(ctx)
		require.NoError(t, err)
		require.Equal(t, want, bv)
		require.Equal(t, hv, bv, "module %s: the history ends at the baseline's version", m.Name)

		requireBaselineCarriesSchemaFiles(t, m.Name)
	}

	want := schemaObjects(t, history.Pool)
	diff := diffSchemaObjects(want, schemaObjects(t, baseline.Pool))
	if len(diff) > 0 {
		t.Fatalf("the baseline differs from the history in %d objects (fix sql/schema/<module>/baseline*.sql, "+
			"then run scripts/fold-baseline.sh):\n%s", len(diff), strings.Join(diff, "\n"))
	}
	t.Logf("the baseline equals the history in all %d objects", len(want))
}

// requireBaselineCarriesSchemaFiles fails unless module's baseline migration carries each of
// sql/schema/<module>/baseline.sql, baseline_after.sql and baseline_down.sql as a statement block.
func requireBaselineCarriesSchemaFiles(t *testing.T, module string) {
	t.Helper()
	name := fmt.Sprintf("%s/%05d_%s.sql", module, baselineVersion(t, module), baselineRelease)
	b, err := fs.ReadFile(migrations.FS, name)
	require.NoError(t, err)
	up, down, found := strings.Cut(string(b), "\n-- +goose Down\n")
	require.True(t, found, "%s has a Down section", name)
	for _, part := range []struct{ file, section, text string }{
		{"baseline.sql", "Up", up}, {"baseline_after.sql", "Up", up}, {"baseline_down.sql", "Down", down},
	} {
		src, err := os.ReadFile(filepath.Join("..", "sql", "schema", module, part.file))
		if part.file == "baseline_after.sql" && os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		if !strings.Contains(part.text, "-- +goose StatementBegin\n"+string(src)+"-- +goose StatementEnd\n") {
			t.Errorf("migrations/%s does not carry sql/schema/%s/%s as it is now in its %s section: "+
				"run scripts/fold-baseline.sh (before the release; after it the baseline never changes)",
				name, module, part.file, part.section)
		}
	}
}

// schemaSnapshotSchemas are the schemas pgdrain's modules own or share.
var schemaSnapshotSchemas = []string{"outbox", "alr", "core"}

// aclText renders the effective ACL expr (NULL = the owner's defaults for the object type objtype,
// an expression: acldefault's letter) of an object owned by owner, one "grantee:PRIVILEGE" per
// privilege, sorted.
func aclText(expr, objtype, owner string) string {
	return fmt.Sprintf(`coalesce((SELECT string_agg(x.p, ', ' ORDER BY x.p) FROM (
		SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee) END
		       || ':' || a.privilege_type || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END AS p
		FROM pg_catalog.aclexplode(coalesce(%s, pg_catalog.acldefault(%s, %s))) a) x), 'none')`, expr, objtype, owner)
}

// schemaObjectQueries each return (object, description) rows for the schemas in $1; an object is
// "kind name", its description every property the comparison covers, one per line.
var schemaObjectQueries = []string{
	// Schemas.
	`SELECT 'schema ' || n.nspname, concat_ws(E'\n',
		'owner ' || pg_catalog.pg_get_userbyid(n.nspowner),
		'acl ' || ` + aclText("n.nspacl", "'n'", "n.nspowner") + `,
		'comment ' || pg_catalog.obj_description(n.oid, 'pg_namespace'))
	 FROM pg_catalog.pg_namespace n WHERE n.nspname = ANY ($1)`,

	// Functions and procedures (aggregates have no pg_get_functiondef: their header and kind).
	`SELECT 'function ' || p.oid::pg_catalog.regprocedure::text, concat_ws(E'\n',
		CASE WHEN p.prokind = 'a' THEN 'aggregate ' || pg_catalog.pg_get_function_result(p.oid)
		     ELSE pg_catalog.pg_get_functiondef(p.oid) END,
		'owner ' || pg_catalog.pg_get_userbyid(p.proowner),
		'acl ' || ` + aclText("p.proacl", "'f'", "p.proowner") + `,
		'comment ' || pg_catalog.obj_description(p.oid, 'pg_proc'))
	 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
	 WHERE n.nspname = ANY ($1)`,

	// Relations other than indexes: tables, views, sequences, composite types, ...
	`SELECT CASE c.relkind WHEN 'r' THEN 'table ' WHEN 'p' THEN 'partitioned table ' WHEN 'v' THEN 'view '
		WHEN 'm' THEN 'materialized view ' WHEN 'S' THEN 'sequence ' WHEN 'f' THEN 'foreign table '
		WHEN 'c' THEN 'composite type ' ELSE 'relation ' END || n.nspname || '.' || c.relname,
		concat_ws(E'\n',
		'persistence ' || c.relpersistence::text,
		'options ' || c.reloptions::text,
		'row security ' || c.relrowsecurity || ' forced ' || c.relforcerowsecurity,
		'replica identity ' || c.relreplident::text,
		'owner ' || pg_catalog.pg_get_userbyid(c.relowner),
		'acl ' || ` + aclText("c.relacl", "CASE c.relkind WHEN 'S' THEN 's'::\"char\" ELSE 'r' END", "c.relowner") + `,
		'comment ' || pg_catalog.obj_description(c.oid, 'pg_class'),
		CASE WHEN c.relkind IN ('v', 'm') THEN 'definition ' || pg_catalog.pg_get_viewdef(c.oid) END,
		(SELECT concat_ws(' ', 'sequence', pg_catalog.format_type(s.seqtypid, NULL), 'start', s.seqstart,
		                  'increment', s.seqincrement, 'min', s.seqmin, 'max', s.seqmax, 'cache', s.seqcache,
		                  CASE WHEN s.seqcycle THEN 'cycle' END)
		 FROM pg_catalog.pg_sequence s WHERE s.seqrelid = c.oid),
		(SELECT 'owned by ' || string_agg(d.refobjid::pg_catalog.regclass::text || '.' || a.attname || ' (' || d.deptype::text || ')', ', ')
		 FROM pg_catalog.pg_depend d
		 JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
		 WHERE c.relkind = 'S' AND d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = c.oid
		   AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.deptype IN ('a', 'i')))
	 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname = ANY ($1) AND c.relkind NOT IN ('i', 'I')`,

	// Columns, with their position among the live columns (a column added later comes last).
	`SELECT 'column ' || n.nspname || '.' || c.relname || '.' || a.attname, concat_ws(E'\n',
		'position ' || pg_catalog.rank() OVER (PARTITION BY c.oid ORDER BY a.attnum),
		'type ' || pg_catalog.format_type(a.atttypid, a.atttypmod),
		'not null ' || a.attnotnull,
		'default ' || pg_catalog.pg_get_expr(ad.adbin, ad.adrelid),
		CASE WHEN a.attidentity::text <> '' THEN 'identity ' || a.attidentity::text END,
		CASE WHEN a.attgenerated::text <> '' THEN 'generated ' || a.attgenerated::text END,
		CASE WHEN a.attcollation <> 0 THEN 'collation ' || a.attcollation::pg_catalog.regcollation::text END,
		'storage ' || a.attstorage::text,
		-- Options set with ALTER COLUMN ... SET (...), without pg_attver: the server these tests run
		-- on stamps every column (catalog views' too) with one, a number that differs per creation.
		'options ' || (SELECT pg_catalog.array_agg(o ORDER BY o) FROM unnest(a.attoptions) o
		               WHERE o NOT LIKE 'pg\_attver=%')::text,
		'acl ' || a.attacl::text,
		'comment ' || pg_catalog.col_description(c.oid, a.attnum))
	 FROM pg_catalog.pg_attribute a
	 JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
	 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	 LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
	 WHERE n.nspname = ANY ($1) AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind NOT IN ('i', 'I', 'S')`,

	// Constraints of tables and of domains.
	`SELECT 'constraint ' || n.nspname || '.' || coalesce(r.relname, t.typname) || '.' || co.conname, concat_ws(E'\n',
		pg_catalog.pg_get_constraintdef(co.oid),
		'validated ' || co.convalidated,
		'comment ' || pg_catalog.obj_description(co.oid, 'pg_constraint'))
	 FROM pg_catalog.pg_constraint co
	 JOIN pg_catalog.pg_namespace n ON n.oid = co.connamespace
	 LEFT JOIN pg_catalog.pg_class r ON r.oid = co.conrelid
	 LEFT JOIN pg_catalog.pg_type t ON t.oid = co.contypid
	 WHERE n.nspname = ANY ($1)`,

	// Indexes.
	`SELECT 'index ' || n.nspname || '.' || c.relname, concat_ws(E'\n',
		pg_catalog.pg_get_indexdef(c.oid),
		'persistence ' || c.relpersistence::text,
		'clustered ' || i.indisclustered || ' replica identity ' || i.indisreplident || ' valid ' || i.indisvalid,
		'comment ' || pg_catalog.obj_description(c.oid, 'pg_class'))
	 FROM pg_catalog.pg_index i
	 JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
	 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname = ANY ($1)`,

	// Triggers (not the internal ones of foreign keys, which their constraints stand for).
	`SELECT 'trigger ' || n.nspname || '.' || c.relname || '.' || tg.tgname, concat_ws(E'\n',
		pg_catalog.pg_get_triggerdef(tg.oid, true),
		'enabled ' || tg.tgenabled::text,
		'comment ' || pg_catalog.obj_description(tg.oid, 'pg_trigger'))
	 FROM pg_catalog.pg_trigger tg
	 JOIN pg_catalog.pg_class c ON c.oid = tg.tgrelid
	 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname = ANY ($1) AND NOT tg.tgisinternal`,

	// Types of their own: enums, domains, ranges, base types (not the row and array types of
	// relations, which the relations stand for).
	`SELECT 'type ' || n.nspname || '.' || t.typname, concat_ws(E'\n',
		'kind ' || t.typtype::text,
		CASE WHEN t.typtype = 'd' THEN 'domain over ' || pg_catalog.format_type(t.typbasetype, t.typtypmod)
		     || ' not null ' || t.typnotnull || ' default ' || coalesce(t.typdefault, 'none') END,
		(SELECT 'labels ' || string_agg(e.enumlabel, ', ' ORDER BY e.enumsortorder)
		 FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid),
		'owner ' || pg_catalog.pg_get_userbyid(t.typowner),
		'acl ' || ` + aclText("t.typacl", "'T'", "t.typowner") + `,
		'comment ' || pg_catalog.obj_description(t.oid, 'pg_type'))
	 FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
	 WHERE n.nspname = ANY ($1) AND t.typtype::text <> 'c' AND t.typelem = 0
	   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.reltype = t.oid)`,

	// Row security policies.
	`SELECT 'policy ' || n.nspname || '.' || c.relname || '.' || po.polname, concat_ws(E'\n',
		'command ' || po.polcmd::text || ' permissive ' || po.polpermissive,
		'roles ' || (SELECT string_agg(x.name, ', ' ORDER BY x.name) FROM (
		               SELECT CASE WHEN r = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(r) END AS name
		               FROM unnest(po.polroles) r) x),
		'using ' || pg_catalog.pg_get_expr(po.polqual, po.polrelid),
		'with check ' || pg_catalog.pg_get_expr(po.polwithcheck, po.polrelid))
	 FROM pg_catalog.pg_policy po
	 JOIN pg_catalog.pg_class c ON c.oid = po.polrelid
	 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname = ANY ($1)`,

	// Default privileges, of the whole database (a migration may set them for any schema, or none).
	`SELECT 'default privileges of ' || pg_catalog.pg_get_userbyid(d.defaclrole)
		|| coalesce(' in schema ' || n.nspname, '') || ' on ' || d.defaclobjtype::text,
		'acl ' || ` + aclText("d.defaclacl", "CASE d.defaclobjtype WHEN 'S' THEN 's'::\"char\" ELSE d.defaclobjtype END", "d.defaclrole") + `
	 FROM pg_catalog.pg_default_acl d LEFT JOIN pg_catalog.pg_namespace n ON n.oid = d.defaclnamespace
	 WHERE $1::text[] IS NOT NULL`,

	// Extensions and event triggers, of the whole database.
	`SELECT 'extension ' || e.extname, 'version ' || e.extversion || ' in ' || e.extnamespace::pg_catalog.regnamespace::text
	 FROM pg_catalog.pg_extension e WHERE $1::text[] IS NOT NULL`,
	`SELECT 'event trigger ' || et.evtname, concat_ws(E'\n', 'event ' || et.evtevent,
		'function ' || et.evtfoid::pg_catalog.regprocedure::text, 'enabled ' || et.evtenabled::text, 'tags ' || et.evttags::text)
	 FROM pg_catalog.pg_event_trigger et WHERE $1::text[] IS NOT NULL`,
}

// schemaObjects describes every object of schemaSnapshotSchemas (and the database-wide ones
// schemaObjectQueries name), keyed by "kind name".
func schemaObjects(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	objects := map[string]string{}
	for _, q := range schemaObjectQueries {
		rows, err := pool.Query(context.Background(), q, schemaSnapshotSchemas)
		require.NoError(t, err, q)
		for rows.Next() {
			var key, desc string
			require.NoError(t, rows.Scan(&key, &desc))
			_, dup := objects[key]
			require.False(t, dup, "two objects are called %q", key)
			objects[key] = desc
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	require.NotEmpty(t, objects)
	return objects
}

// diffSchemaObjects lists, sorted by object, what is only in history, only in baseline, and what
// differs (as a line diff, "-" the history, "+" the baseline).
func diffSchemaObjects(history, baseline map[string]string) []string {
	keys := make([]string, 0, len(history)+len(baseline))
	for k := range history {
		keys = append(keys, k)
	}
	for k := range baseline {
		if _, ok := history[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	indent := func(s string) string { return "      " + strings.ReplaceAll(s, "\n", "\n      ") }
	var out []string
	for _, k := range keys {
		h, inHistory := history[k]
		b, inBaseline := baseline[k]
		switch {
		case !inBaseline:
			out = append(out, "  only in the history: "+k+"\n"+indent(h))
		case !inHistory:
			out = append(out, "  only in the baseline: "+k+"\n"+indent(b))
		case h != b:
			out = append(out, "  differs: "+k+"\n"+strings.Join(lineDiff(h, b), "\n"))
		}
	}
	return out
}

// lineDiff is a plain longest-common-subsequence diff of a's and b's lines: changed lines with a
// line of context around them, "-" from a, "+" from b.
func lineDiff(a, b string) []string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var all []line
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			all = append(all, line{' ', x[i]})
			i, j = i+1, j+1
		case j < len(y) && (i == len(x) || lcs[i][j+1] >= lcs[i+1][j]):
			all = append(all, line{'+', y[j]})
			j++
		default:
			all = append(all, line{'-', x[i]})
			i++
		}
	}
	var out []string
	for k, l := range all {
		near := l.op != ' ' || (k > 0 && all[k-1].op != ' ') || (k+1 < len(all) && all[k+1].op != ' ')
		if near {
			out = append(out, "    "+string(l.op)+" "+l.text)
		}
	}
	return out
}
