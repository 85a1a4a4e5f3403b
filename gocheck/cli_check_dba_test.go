package gocheck

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// checkReport is `pgdrain --json check`'s output.
type checkReport struct {
	OK       bool `json:"ok"`
	Problems []struct {
		Check   string  `json:"check"`
		Problem string  `json:"problem"`
		Name    *string `json:"name"`
		Detail  string  `json:"detail"`
	} `json:"problems"`
	Skipped []struct {
		Check  string `json:"check"`
		Detail string `json:"detail"`
	} `json:"skipped"`
}

// A CHECK added NOT VALID while rows were pending fails every claim that takes one of them (23514),
// and wedged_partitions still calls the key ready: check names the constraint and the rows.
func TestCLI_CheckNamesACheckThatPendingRowsBreak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.cq', partition_column => 'k')`)
	cliExec(t, db.Pool, `INSERT INTO public.cq (event_type, payload, k, sent_at)
		SELECT 'old', '{}', 'a', CASE WHEN g = 1 THEN now() END FROM generate_series(1, 8) g`)
	cliExec(t, db.Pool, `ALTER TABLE public.cq ADD COLUMN tenant text`)
	cliExec(t, db.Pool, `ALTER TABLE public.cq ADD CONSTRAINT cq_tenant_required CHECK (tenant IS NOT NULL) NOT VALID`)

	_, err := db.Pool.Exec(ctx, `SELECT * FROM outbox.claim_batch('public.cq', 10)`)
	code, _ := sqlState(err)
	require.Equal(t, "23514", code, "the claim fails on the pending row: %v", err)
	var reason string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT reason FROM outbox.wedged_partitions('public.cq', '0s', 10)`).Scan(&reason))
	require.Contains(t, reason, "ready", "wedged_partitions does not see it")

	var r checkReport
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.cq", "--dsn", db.URL)
	require.False(t, r.OK)
	require.Empty(t, r.Skipped, "the owner may read the table and its sequence")
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	p := r.Problems[0]
	require.Equal(t, "constraints", p.Check)
	require.Equal(t, "broken by pending rows", p.Problem)
	require.Equal(t, "cq_tenant_required", *p.Name)
	require.Contains(t, p.Detail, "7 pending row(s) of public.cq")
	require.Contains(t, p.Detail, "(NOT VALID)")
	require.Contains(t, p.Detail, "ids 2, 3, 4, 5, 6 and 2 more", "the sent row 1 breaks it too, and does not count")
	require.Contains(t, p.Detail, "DROP CONSTRAINT")

	text := runCLI(t, "check", "public.cq", "--dsn", db.URL)
	require.Equal(t, cli.ExitProblems, text.code, text.stderr)
	require.Contains(t, text.stdout, "cq_tenant_required")

	// pgdrain's own CHECKs count too: a JSON null payload written while its CHECK was gone.
	cliExec(t, db.Pool, `UPDATE public.cq SET tenant = 't'`)
	cliExec(t, db.Pool, `ALTER TABLE public.cq DROP CONSTRAINT pgdrain_payload_not_json_null`)
	cliExec(t, db.Pool, `UPDATE public.cq SET payload = 'null' WHERE id = 8`)
	cliExec(t, db.Pool, `ALTER TABLE public.cq ADD CONSTRAINT pgdrain_payload_not_json_null
		CHECK (pg_column_size(payload) > 64 OR jsonb_typeof(payload) <> 'null') NOT VALID`)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.cq", "--dsn", db.URL)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	require.Equal(t, "pgdrain_payload_not_json_null", *r.Problems[0].Name)
	require.Contains(t, r.Problems[0].Detail, "1 pending row(s) of public.cq")
	require.Contains(t, r.Problems[0].Detail, "ids 8;")

	cliExec(t, db.Pool, `UPDATE public.cq SET payload = '{}' WHERE id = 8`)

	// A CHECK that raises an error on a pending row stalls the claims alike: check names it.
	cliExec(t, db.Pool, `UPDATE public.cq SET payload = '{"n": "x"}' WHERE id = 8`)
	cliExec(t, db.Pool, `ALTER TABLE public.cq ADD CONSTRAINT cq_n_number CHECK ((payload ->> 'n')::int >= 0) NOT VALID`)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.cq", "--dsn", db.URL)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	require.Equal(t, "fails", r.Problems[0].Problem)
	require.Equal(t, "cq_n_number", *r.Problems[0].Name)
	require.Contains(t, r.Problems[0].Detail, "22P02")
	cliExec(t, db.Pool, `ALTER TABLE public.cq DROP CONSTRAINT cq_n_number`)

	// Also an exception a constraint's function raises (P0001), not only a data exception.
	cliExec(t, db.Pool, `CREATE FUNCTION public.cq_refuses(p jsonb) RETURNS boolean LANGUAGE plpgsql AS
		$$BEGIN IF p ->> 'n' = 'x' THEN RAISE EXCEPTION 'refused by the owner''s rule'; END IF; RETURN true; END$$`)
	cliExec(t, db.Pool, `ALTER TABLE public.cq ADD CONSTRAINT cq_owner_rule CHECK (public.cq_refuses(payload)) NOT VALID`)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.cq", "--dsn", db.URL)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	require.Equal(t, "fails", r.Problems[0].Problem)
	require.Equal(t, "cq_owner_rule", *r.Problems[0].Name)
	require.Contains(t, r.Problems[0].Detail, "P0001")
	cliExec(t, db.Pool, `ALTER TABLE public.cq DROP CONSTRAINT cq_owner_rule`)
	cliExec(t, db.Pool, `UPDATE public.cq SET payload = '{}' WHERE id = 8`)
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.cq", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)
	text = runCLI(t, "check", "public.cq", "--dsn", db.URL)
	require.Equal(t, cli.ExitOK, text.code, text.stderr)
	require.Contains(t, text.stdout, "no CHECK a pending row breaks")

	// pgdrain_operator may not read the table: the check is skipped, said so, and is no problem.
	operator := loginURL(t, db, "pgdrain_operator")
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.cq", "--dsn", operator)
	require.True(t, r.OK)
	skipped := map[string]string{}
	for _, s := range r.Skipped {
		skipped[s.Check] = s.Detail
	}
	require.Contains(t, skipped["constraints"], "42501")
	require.Contains(t, skipped["sequence"], "42501")
	text = runCLI(t, "check", "public.cq", "--dsn", operator)
	require.Equal(t, cli.ExitOK, text.code, text.stderr)
	require.Contains(t, text.stdout, "not checked: constraints:")
	require.NotContains(t, text.stdout, "no CHECK a pending row breaks")
}

// An id sequence behind the ids in the table makes producers' inserts fail with 23505 (and rows
// above the sequence break per-key order): check names the sequence and the setval that fixes it.
func TestCLI_CheckNamesAnIDSequenceBehindTheIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.cs')`)
	cliExec(t, db.Pool, `INSERT INTO public.cs (event_type, payload) SELECT 'e', '{}' FROM generate_series(1, 3)`)
	var r checkReport
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.cs", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)

	cliExec(t, db.Pool, `SELECT pg_catalog.setval('public.cs_id_seq', 1)`)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.cs", "--dsn", db.URL)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	p := r.Problems[0]
	require.Equal(t, "sequence", p.Check)
	require.Equal(t, "behind the ids", p.Problem)
	require.Equal(t, "public.cs_id_seq", *p.Name)
	require.Contains(t, p.Detail, "last gave out 1, but public.cs holds ids up to 3")
	require.Contains(t, p.Detail, "23505")
	fix := "SELECT pg_catalog.setval('public.cs_id_seq', (SELECT max(id) FROM public.cs))"
	require.Contains(t, p.Detail, fix)
	_, err := db.Pool.Exec(ctx, `INSERT INTO public.cs (event_type, payload) VALUES ('e', '{}')`)
	code, _ := sqlState(err)
	require.Equal(t, "23505", code, "the producer collides with id 2: %v", err)

	// ALTER COLUMN id RESTART leaves the sequence not called: the next id is the restart value.
	cliExec(t, db.Pool, `ALTER TABLE public.cs ALTER COLUMN id RESTART WITH 3`)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.cs", "--dsn", db.URL)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	require.Contains(t, r.Problems[0].Detail, "gives out 3 next")
	cliExec(t, db.Pool, `ALTER TABLE public.cs ALTER COLUMN id RESTART WITH 4`)
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.cs", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)

	cliExec(t, db.Pool, `SELECT pg_catalog.setval('public.cs_id_seq', 2)`)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.cs", "--dsn", db.URL)
	cliExec(t, db.Pool, fix)
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.cs", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)
	cliExec(t, db.Pool, `INSERT INTO public.cs (event_type, payload) VALUES ('e', '{}')`)
}

// The operator's login has a search_path with a schema ahead of pg_catalog that holds its own
// =(text, text). pgdrain pins search_path = pg_catalog, pg_temp on its connections, so none of its
// commands runs the attacker's operator.
func TestCLI_HostileSearchPathRunsNothingOfTheAttacker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.ch', partition_column => 'k')`)
	cliExec(t, db.Pool, `INSERT INTO public.ch (event_type, payload, k) VALUES ('e', '{}', 'a')`)
	cliExec(t, db.Pool, `
		CREATE SCHEMA evil;
		CREATE TABLE evil.hits (by_role text);
		CREATE FUNCTION evil.text_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN
		  INSERT INTO evil.hits VALUES (current_user);
		  RETURN a OPERATOR(pg_catalog.=) b;
		END $$;
		CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_eq);
		GRANT USAGE ON SCHEMA evil TO PUBLIC;
		GRANT INSERT ON evil.hits TO PUBLIC;`)
	operator := loginURL(t, db, "pgdrain_operator")
	u, err := url.Parse(operator)
	require.NoError(t, err)
	cliExec(t, db.Pool, fmt.Sprintf(`ALTER ROLE %s SET search_path = evil, pg_catalog, public`,
		pgx.Identifier{u.User.Username()}.Sanitize()))

	hits := func() int64 {
		var n int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM evil.hits`).Scan(&n))
		return n
	}
	conn, err := pgx.Connect(ctx, operator)
	require.NoError(t, err)
	var same bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT 'x'::text = 'x'::text`).Scan(&same))
	require.NoError(t, conn.Close(ctx))
	require.True(t, same)
	require.EqualValues(t, 1, hits(), "the login's own queries do run the attacker's operator")
	cliExec(t, db.Pool, `TRUNCATE evil.hits`)

	var r checkReport
	runCLIJSON(t, cli.ExitOK, &r, "check", "ch", "--dsn", operator)
	require.True(t, r.OK, "%+v", r.Problems)
	for _, args := range [][]string{
		{"queues"}, {"stats", "public.ch"}, {"wedged", "public.ch", "--older-than", "0s"},
		{"poisoned", "public.ch", "--key", "a"}, {"actions", "public.ch"}, {"--version"},
	} {
		res := runCLI(t, append(args, "--dsn", operator)...)
		require.Contains(t, []int{cli.ExitOK, cli.ExitProblems}, res.code, "pgdrain %v: %s", args, res.stderr)
	}
	require.Zero(t, hits(), "no pgdrain command ran evil.=")
}

// Behind PgBouncer, which refuses a startup parameter it does not track ("unsupported startup
// parameter: search_path"), the commands still work: they say so on stderr and connect without
// pinning search_path (docs/pgbouncer.md: the CLI takes the same setting as the drainer).
func TestCLI_CommandsWorkBehindAPoolerThatRefusesSearchPath(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	operatorURL := loginURL(t, db, "pgdrain_operator")
	b := startPgBouncer(t, db.URL, 1, urlUser(t, operatorURL))
	through := b.url(t, operatorURL, url.Values{"default_query_exec_mode": {"simple_protocol"}})
	r := runCLI(t, "stats", "public.cli_events", "--dsn", through)
	require.Equal(t, cli.ExitOK, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "refused the search_path startup parameter")
	require.Contains(t, r.stdout, "12", "the stats of the queue's 12 pending rows")
}

// A queue table partitioned by range of id (docs/operations.md): PostgreSQL takes autovacuum
// settings only on its partitions, which hold the rows ("unrecognized parameter" on the parent),
// so check reads each partition's and names it. It read the parent's, and such a queue could never
// pass check: the advice it printed failed.
func TestCLI_CheckReadsTheAutovacuumOfARangePartitionedTablesPartitions(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cliExec(t, db.Pool, `CREATE TABLE public.rq (id bigint GENERATED BY DEFAULT AS IDENTITY, event_type text NOT NULL,
		payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), k text, PRIMARY KEY (id)) PARTITION BY RANGE (id)`)
	cliExec(t, db.Pool, `CREATE TABLE public.rq_1 PARTITION OF public.rq FOR VALUES FROM (1) TO (100)`)
	cliExec(t, db.Pool, `CREATE TABLE public.rq_2 PARTITION OF public.rq FOR VALUES FROM (100) TO (200)`)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.rq', 'k')`)
	cliExec(t, db.Pool, `ALTER TABLE public.rq_1 SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
		autovacuum_vacuum_insert_scale_factor = 0.01)`)

	var r checkReport
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.rq", "--dsn", db.URL)
	require.Len(t, r.Problems, 3, "%+v", r.Problems)
	for _, p := range r.Problems {
		require.Equal(t, "autovacuum", p.Check)
		require.Contains(t, p.Detail, "ALTER TABLE public.rq_2 SET (", "the partition without settings, named")
	}
	cliExec(t, db.Pool, `ALTER TABLE public.rq_2 SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
		autovacuum_vacuum_insert_scale_factor = 0.01)`)
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.rq", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)
}

// A partition column whose equal values have different texts splits a key in two (rows of one key
// delivered together): create_queue refuses it for a new queue (00044), a queue registered before
// keeps it, and check names it. As pgdrain_operator, who may not call the function that judges
// it, the check is skipped and said so.
func TestCLI_CheckNamesAPartitionKeyWithoutOneTextPerValue(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.ck', 'k')`)
	var r checkReport
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.ck", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)

	// As a queue registered before 00044 could have it.
	cliExec(t, db.Pool, `DROP TRIGGER pgdrain_key_fixed ON public.ck;
		ALTER TABLE public.ck DROP CONSTRAINT pgdrain_partition_key_not_empty;
		ALTER TABLE public.ck ALTER COLUMN k TYPE numeric USING k::numeric;
		UPDATE outbox.queues SET partition_type = 'numeric' WHERE queue = 'public.ck';
		SELECT outbox.create_queue('public.ck', 'k')`)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.ck", "--dsn", db.URL)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	require.Equal(t, "key type", r.Problems[0].Check)
	require.Equal(t, "k", *r.Problems[0].Name)
	require.Contains(t, r.Problems[0].Detail, "its type numeric is not one whose values each have one text")

	operator := loginURL(t, db, "pgdrain_operator")
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.ck", "--dsn", operator)
	skipped := map[string]string{}
	for _, s := range r.Skipped {
		skipped[s.Check] = s.Detail
	}
	require.Contains(t, skipped["key type"], "42501")
}

// A schema before 00042 has no key-fixed triggers to find, and create_queue there can not make
// them: check does not ask for them (it failed every partitioned queue of such a database).
func TestCLI_CheckAsksForTheKeyFixedTriggerOnlyFrom00042(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	migrateTo(t, db, "outbox", 41)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.old', 'k')`)
	var r checkReport
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.old", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)
}

// A DBA changes the type of a column pgdrain's statements read (ALTER COLUMN ... TYPE): every
// claim then fails (42804) and the queue stalls. check names the column, its type and the type
// pgdrain needs, with the ALTER that puts it back; it used to answer ok while claims failed.
func TestCLI_CheckNamesAColumnOfAnotherType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.ct', 'k')`)
	cliExec(t, db.Pool, `INSERT INTO public.ct (event_type, payload, k) VALUES ('e', '{}', 'a')`)
	var r checkReport
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.ct", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)

	cliExec(t, db.Pool, `ALTER TABLE public.ct ALTER COLUMN attempt_count TYPE bigint`)
	_, err := db.Pool.Exec(ctx, `SELECT * FROM outbox.claim_batch('public.ct', 1)`)
	code, _ := sqlState(err)
	require.Equal(t, "42804", code, "a claim fails: %v", err)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.ct", "--dsn", db.URL)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	p := r.Problems[0]
	require.Equal(t, "columns", p.Check)
	require.Equal(t, "other type", p.Problem)
	require.Equal(t, "attempt_count", *p.Name)
	require.Contains(t, p.Detail, "column attempt_count of public.ct is bigint, pgdrain's statements need integer")
	require.Contains(t, p.Detail, "ALTER TABLE public.ct ALTER COLUMN attempt_count TYPE integer")

	cliExec(t, db.Pool, `ALTER TABLE public.ct ALTER COLUMN attempt_count TYPE integer`)
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.ct", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)
}

// A default on a column pgdrain writes that makes a new row other than pending and free: sent_at
// DEFAULT now() writes every row as sent, so it is never delivered and no count shows it.
// create_queue refuses it for a new queue since 00052; check names it on a registered one.
func TestCLI_CheckNamesADefaultThatWritesRowsSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.cd', 'k')`)
	var r checkReport
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.cd", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)

	cliExec(t, db.Pool, `ALTER TABLE public.cd ALTER COLUMN sent_at SET DEFAULT now(), ALTER COLUMN attempt_count DROP NOT NULL`)
	cliExec(t, db.Pool, `INSERT INTO public.cd (event_type, payload, k) VALUES ('e', '{}', 'a')`)
	var pending int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pending FROM outbox.stats('public.cd')`).Scan(&pending))
	require.Zero(t, pending, "the row was written as sent")
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.cd", "--dsn", db.URL)
	require.Len(t, r.Problems, 2, "%+v", r.Problems)
	byName := map[string]string{}
	for _, p := range r.Problems {
		require.Equal(t, "columns", p.Check)
		require.Equal(t, "default", p.Problem)
		byName[*p.Name] = p.Detail
	}
	require.Contains(t, byName["sent_at"], "column sent_at of public.cd has DEFAULT now(): new rows are written as sent")
	require.Contains(t, byName["sent_at"], "ALTER TABLE public.cd ALTER COLUMN sent_at DROP DEFAULT")
	require.Contains(t, byName["attempt_count"], "is not NOT NULL DEFAULT 0")

	cliExec(t, db.Pool, `ALTER TABLE public.cd ALTER COLUMN sent_at DROP DEFAULT, ALTER COLUMN attempt_count SET NOT NULL`)
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.cd", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)
}

// Row level security that applies to the role pgdrain's functions run as (here a role that is not
// a superuser and not the table's owner, as docs/security.md's migrating role) hides from every
// claim, result and stats the rows the policy does not show the caller's session: never delivered,
// counted nowhere. create_queue refuses it for a new queue (00052); check names it on a table
// changed since, and says what lifts it.
func TestCLI_CheckNamesRowSecurityThatHidesRowsFromPgdrain(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.rs', 'k')`)
	cliExec(t, db.Pool, `INSERT INTO public.rs (event_type, payload, k) VALUES ('e', '{}', 'a'), ('e', '{"tenant": 2}', 'b')`)
	definer := fmt.Sprintf("rs_definer_%s", db.Name)
	cliExec(t, db.Pool, fmt.Sprintf(`CREATE ROLE %s NOLOGIN`, pgx.Identifier{definer}.Sanitize()))
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), fmt.Sprintf(`ALTER FUNCTION outbox.claim_batch(text, integer, interval) OWNER TO CURRENT_USER;
			DROP ROLE %s`, pgx.Identifier{definer}.Sanitize()))
	})
	cliExec(t, db.Pool, fmt.Sprintf(`ALTER FUNCTION outbox.claim_batch(text, integer, interval) OWNER TO %s`, pgx.Identifier{definer}.Sanitize()))
	var r checkReport
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.rs", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)

	cliExec(t, db.Pool, `ALTER TABLE public.rs ENABLE ROW LEVEL SECURITY`)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.rs", "--dsn", db.URL)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	p := r.Problems[0]
	require.Equal(t, "row security", p.Check)
	require.Equal(t, "applies to pgdrain", p.Problem)
	require.Contains(t, p.Detail, "public.rs has row level security that applies to "+definer+", the role pgdrain's functions run as (the table is owned by")
	require.Contains(t, p.Detail, "ALTER TABLE public.rs DISABLE ROW LEVEL SECURITY")

	cliExec(t, db.Pool, `ALTER TABLE public.rs DISABLE ROW LEVEL SECURITY`)
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.rs", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)
}

// A lock-mode batch left prepared (PREPARE TRANSACTION by a two-phase-commit coordinator that then
// went away) holds its rows and keys until someone commits or rolls it back, across restarts;
// wedged_partitions calls its keys ready. check names it once it is older than 10 s.
func TestCLI_CheckNamesAPreparedTransactionHoldingTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	var prepared int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT current_setting('max_prepared_transactions')::int`).Scan(&prepared))
	if prepared == 0 {
		t.Skip("the server has max_prepared_transactions = 0 (scripts/with-postgres.sh starts its clusters with 8)")
	}
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.pt', 'k')`)
	cliExec(t, db.Pool, `INSERT INTO public.pt (event_type, payload, k) VALUES ('e', '{}', 'a')`)
	gid := "pgdrain_check_" + db.Name
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	var id int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT id FROM outbox.claim_locked('public.pt', 1)`).Scan(&id))
	_, err = conn.Exec(ctx, fmt.Sprintf(`PREPARE TRANSACTION '%s'`, gid))
	require.NoError(t, err)
	conn.Release()
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), fmt.Sprintf(`ROLLBACK PREPARED '%s'`, gid)) })

	var r checkReport
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.pt", "--dsn", db.URL)
	require.True(t, r.OK, "a transaction prepared a moment ago is not named: %+v", r.Problems)
	time.Sleep(11 * time.Second)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.pt", "--dsn", db.URL)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	p := r.Problems[0]
	require.Equal(t, "prepared transactions", p.Check)
	require.Equal(t, gid, *p.Name)
	require.Contains(t, p.Detail, fmt.Sprintf("prepared transaction %q", gid))
	require.Contains(t, p.Detail, "COMMIT PREPARED or ROLLBACK PREPARED it")

	_, err = db.Pool.Exec(ctx, fmt.Sprintf(`ROLLBACK PREPARED '%s'`, gid))
	require.NoError(t, err)
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.pt", "--dsn", db.URL)
	require.True(t, r.OK, "%+v", r.Problems)
}
