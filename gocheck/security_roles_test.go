package gocheck

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// roleCall is one statement run as a member of a pgdrain role, and the SQLSTATE it must end with
// ("" = it must succeed).
type roleCall struct {
	what, sql, wantCode string
}

// securityFixture: a partitioned queue public.events with pending rows, one poisoned row, an
// unrelated table public.secrets and a table that is not a queue.
func securityFixture(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), `
		SELECT outbox.create_queue('public.events', 'resource_id', max_attempts => 3);
		SELECT outbox.enqueue('public.events', 'created', '{"n": 1}', 'r' || g) FROM generate_series(1, 20) g;
		UPDATE public.events SET attempt_count = 3, last_error = 'boom' WHERE id = 20;
		CREATE TABLE public.secrets (id int PRIMARY KEY, secret text);
		INSERT INTO public.secrets VALUES (1, 'the password');`)
	require.NoError(t, err)
	return db
}

func runAs(t *testing.T, conn *pgx.Conn, role string, calls []roleCall) {
	t.Helper()
	ctx := context.Background()
	for _, c := range calls {
		_, err := conn.Exec(ctx, c.sql)
		code, msg := sqlState(err)
		if c.wantCode == "" {
			require.NoError(t, err, "%s: %s must be allowed (%s)", role, c.what, c.sql)
		} else {
			require.Error(t, err, "%s: %s must be refused (%s)", role, c.what, c.sql)
			require.Equal(t, c.wantCode, code, "%s: %s: %s", role, c.what, msg)
		}
	}
}

// A worker claims, records, heartbeats and releases in both modes, and can do nothing else: it
// can not read or write any table directly (so it can not bypass the fencing token), not requeue,
// purge, enqueue, create or alter a queue, nor call internal helpers.
func TestSecurity_WorkerCanDrainAndNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := securityFixture(t)
	worker := loginAs(t, db, "pgdrain_worker")

	var id int64
	var token string
	require.NoError(t, worker.QueryRow(ctx,
		`SELECT id, lease_token::text FROM outbox.claim_batch('public.events', 1, '30 seconds')`).Scan(&id, &token))
	var extended bool
	require.NoError(t, worker.QueryRow(ctx,
		`SELECT outbox.extend_lease('public.events', $1, $2::uuid, '1 minute') IS NOT NULL`, id, token).Scan(&extended))
	require.True(t, extended)
	var applied bool
	require.NoError(t, worker.QueryRow(ctx,
		`SELECT outbox.apply_result('public.events', $1, $2::uuid, 'sent')`, id, token).Scan(&applied))
	require.True(t, applied)

	runAs(t, worker, "worker", []roleCall{
		{"claim and release", `SELECT outbox.release('public.events', c.id, c.lease_token) FROM outbox.claim_batch('public.events', 2) c`, ""},
		{"claim and apply a batch", `SELECT outbox.apply_results('public.events', array_agg(c.id), array_agg(c.lease_token), array_agg('transient'::text)) FROM outbox.claim_batch('public.events', 2) c`, ""},
		{"lock mode", `BEGIN; SELECT outbox.settle_locked('public.events', (SELECT array_agg(c.id) FROM outbox.claim_locked('public.events', 2) c), ARRAY['sent', 'sent']); COMMIT`, ""},
		{"read an unrelated table", `SELECT * FROM public.secrets`, "42501"},
		{"read the queue table", `SELECT * FROM public.events`, "42501"},
		{"update the queue table (bypass the token)", `UPDATE public.events SET sent_at = now()`, "42501"},
		{"read the partition heads", `SELECT * FROM outbox.partition_heads`, "42501"},
		{"read the registry", `SELECT * FROM outbox.queues`, "42501"},
		{"claim from a table that is no queue", `SELECT * FROM outbox.claim_batch('public.secrets')`, "42P01"},
		{"requeue", `SELECT outbox.requeue_poisoned('public.events')`, "42501"},
		{"purge", `SELECT outbox.purge_sent('public.events', '0 seconds')`, "42501"},
		{"skip a row", `SELECT outbox.poison_row('public.events', 1, 0, 'x')`, "42501"},
		{"dismiss poisoned rows", `SELECT outbox.dismiss_poisoned('public.events', '{20}', 'x')`, "42501"},
		{"read stats (the drainer's gauges)", `SELECT * FROM outbox.stats('public.events')`, ""},
		{"enqueue", `SELECT outbox.enqueue('public.events', 'x', '{}', 'r1')`, "42501"},
		{"insert into the queue table", `INSERT INTO public.events (event_type, payload, resource_id) VALUES ('x', '{}', 'r1')`, "42501"},
		{"alter a queue through create_queue", `SELECT outbox.create_queue('public.events', 'resource_id', max_attempts => 1)`, "42501"},
		{"drop a queue", `SELECT outbox.drop_queue('public.events')`, "42501"},
		{"alter the queue table", `ALTER TABLE public.events ADD COLUMN x int`, "42501"},
		{"call the internal claim", `SELECT outbox._claim(q, 10, '1 minute', 'lease', 1) FROM outbox.queues q`, "42501"},
		{"create an object in schema outbox", `CREATE TABLE outbox.mine (x int)`, "42501"},
	})
}

// A producer enqueues and inserts plainly, RETURNING id (create_queue granted INSERT and SELECT (id);
// the heads trigger runs as definer, so outbox.partition_heads stays private); it can not read
// payloads, update rows, claim in either mode, record, nor read stats.
func TestSecurity_ProducerCanEnqueueAndNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := securityFixture(t)
	producer := loginAs(t, db, "pgdrain_producer")

	runAs(t, producer, "producer", []roleCall{
		{"enqueue", `SELECT outbox.enqueue('public.events', 'created', '{}', 'new-key-1')`, ""},
		{"plain insert returning id", `INSERT INTO public.events (event_type, payload, resource_id) VALUES ('x', '{}', 'new-key-2'), ('x', '{}', 'r1') RETURNING id`, ""},
		{"read payloads", `SELECT payload FROM public.events`, "42501"},
		{"claim", `SELECT * FROM outbox.claim_batch('public.events')`, "42501"},
		{"claim locked", `SELECT * FROM outbox.claim_locked('public.events')`, "42501"},
		{"apply a result", `SELECT outbox.apply_result('public.events', 1, gen_random_uuid(), 'sent')`, "42501"},
		{"release", `SELECT outbox.release('public.events', 1, gen_random_uuid())`, "42501"},
		{"read the queue table", `SELECT * FROM public.events`, "42501"},
		{"update the queue table", `UPDATE public.events SET sent_at = now()`, "42501"},
		{"read an unrelated table", `SELECT * FROM public.secrets`, "42501"},
		{"read stats", `SELECT * FROM outbox.stats('public.events')`, "42501"},
		{"requeue", `SELECT outbox.requeue_poisoned('public.events')`, "42501"},
		{"write a partition head", `INSERT INTO outbox.partition_heads (queue_id, partition_key) VALUES (1, 'x')`, "42501"},
	})
	var heads int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*) FROM outbox.partition_heads WHERE partition_key IN ('new-key-1', 'new-key-2')`).Scan(&heads))
	require.Equal(t, 2, heads, "the producer's new keys got partition heads through the definer trigger")
}

// An operator reads the state, requeues and purges; it can not claim in either mode, enqueue or
// read the events themselves.
func TestSecurity_OperatorCanInspectRequeuePurgeAndNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := securityFixture(t)
	operator := loginAs(t, db, "pgdrain_operator")

	var poisoned int64
	require.NoError(t, operator.QueryRow(ctx, `SELECT poisoned FROM outbox.stats('public.events')`).Scan(&poisoned))
	require.EqualValues(t, 1, poisoned)
	var requeued int64
	require.NoError(t, operator.QueryRow(ctx, `SELECT outbox.requeue_poisoned('public.events')`).Scan(&requeued))
	require.EqualValues(t, 1, requeued)

	runAs(t, operator, "operator", []roleCall{
		{"wedged partitions", `SELECT * FROM outbox.wedged_partitions('public.events', '0 seconds')`, ""},
		{"check indexes", `SELECT * FROM outbox.check_indexes('public.events')`, ""},
		{"purge", `SELECT outbox.purge_sent('public.events', '0 seconds', 100)`, ""},
		{"skip a row", `SELECT outbox.poison_row('public.events', 1, 0, 'never succeeds')`, ""},
		{"retry a row now", `SELECT outbox.retry_row('public.events', 2, 0)`, ""},
		{"dismiss poisoned rows", `SELECT outbox.dismiss_poisoned('public.events', '{1}', 'not needed')`, ""},
		{"read the operators' log", `SELECT * FROM outbox.operator_log('public.events')`, ""},
		{"list the queues", `SELECT queue, partition_column FROM outbox.queues`, ""},
		{"claim", `SELECT * FROM outbox.claim_batch('public.events')`, "42501"},
		{"claim locked", `SELECT * FROM outbox.claim_locked('public.events')`, "42501"},
		{"apply a result", `SELECT outbox.apply_result('public.events', 1, gen_random_uuid(), 'sent')`, "42501"},
		{"enqueue", `SELECT outbox.enqueue('public.events', 'x', '{}', 'r1')`, "42501"},
		{"read the events", `SELECT payload FROM public.events`, "42501"},
		{"read an unrelated table", `SELECT * FROM public.secrets`, "42501"},
		{"alter a queue", `SELECT outbox.create_queue('public.events', 'resource_id', max_attempts => 1)`, "42501"},
		{"change the registry directly", `UPDATE outbox.queues SET max_attempts = 1`, "42501"},
	})
}

// Every outbox function has a deliberate privilege decision: nothing is executable by PUBLIC, and
// each public function is SECURITY DEFINER exactly when docs/security.md says so. A function added
// later without a decision fails here.
func TestSecurity_EveryFunctionHasItsDecidedPrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	want := map[string]string{
		"outbox.enqueue(text,text,jsonb,text,timestamp with time zone,jsonb,uuid)":       "definer producer",
		"outbox.enqueue_event(text,text,jsonb,text,timestamp with time zone,jsonb,uuid)": "definer producer",
		"outbox.tg_queue__commit()":                                                           "definer -",
		"outbox.tg_queue__truncate()":                                                         "definer -",
		"outbox.tg_queue__snapshot_producer()":                                                "invoker -",
		"outbox.tg_queue__key_fixed()":                                                        "invoker -",
		"outbox.queue_info(text)":                                                             "definer operator,reader,worker",
		"outbox.next_due(text)":                                                               "definer operator,reader,worker",
		"outbox.repair(text,boolean)":                                                         "definer operator,worker",
		"outbox.heads_rebuild(text)":                                                          "definer operator,reader,worker",
		"outbox.claim_batch(text,integer,interval)":                                           "definer worker",
		"outbox.claim_runs(text,integer,interval,integer)":                                    "definer worker",
		"outbox.claim_locked_runs(text,integer,integer)":                                      "definer worker",
		"outbox.apply_result(text,bigint,uuid,text,text,timestamp with time zone)":            "definer worker",
		"outbox.apply_results(text,bigint[],uuid[],text[],text[],timestamp with time zone[])": "definer worker",
		"outbox.extend_lease(text,bigint,uuid,interval)":                                      "definer worker",
		"outbox.release(text,bigint,uuid)":                                                    "definer worker",
		"outbox.claim_locked(text,integer)":                                                   "definer worker",
		"outbox.settle_locked(text,bigint[],text[],text[],timestamp with time zone[])":        "definer worker",
		"outbox.stats(text)":                                                                  "definer operator,reader,worker",
		"outbox.wedged_partitions(text,interval,integer)":                                     "definer operator,reader,worker",
		"outbox.check_indexes(text)":                                                          "definer operator,reader,worker",
		"outbox.requeue_poisoned(text,bigint[])":                                              "definer operator",
		"outbox.poisoned_rows(text,integer,bigint)":                                           "definer operator,reader",
		"outbox.release_lease(text,bigint,timestamp with time zone)":                          "definer operator",
		"outbox.purge_sent(text,interval,integer)":                                            "definer operator",
		"outbox.create_queue(text,text,integer,interval,interval,text,text,interval)":         "invoker -",
		"outbox.drop_queue(text,boolean)":                                                     "invoker -",
		"outbox.tg_queue__notify()":                                                           "definer -",
		"outbox.set_notify(text,text)":                                                        "invoker -",
		"outbox.drainer_waits(text,interval)":                                                 "definer worker",
		"outbox.drainer_woke(text,bigint)":                                                    "definer worker",
		"outbox.claim_turn(text,interval)":                                                    "definer worker",
		"outbox.poison_row(text,bigint,integer,text)":                                         "definer operator",
		"outbox.retry_row(text,bigint,integer,text)":                                          "definer operator",
		"outbox.dismiss_poisoned(text,bigint[],text)":                                         "definer operator",
		"outbox.operator_log(text,integer,bigint)":                                            "definer operator,reader",
		"outbox.version()":                                                                    "invoker operator,producer,reader,worker",
	}
	// A partitioned queue has a heads trigger function of its own (outbox._install_heads_trigger).
	// A claim and its result make the queue's statements with kept plans (outbox._prepared).
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.decided_events', 'resource_id')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO public.decided_events (event_type, payload, resource_id) VALUES ('e', '{}', 'k')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `SELECT outbox.apply_results('public.decided_events', array_agg(c.id), array_agg(c.lease_token),
		array_agg('sent'::text)) FROM outbox.claim_batch('public.decided_events', 32) c`)
	require.NoError(t, err)
	generated, kept := 0, 0
	rows, err := db.Pool.Query(ctx, `
		SELECT p.oid::regprocedure::text,
		       CASE WHEN p.prosecdef THEN 'definer' ELSE 'invoker' END || ' ' ||
		       COALESCE((SELECT string_agg(replace(r.rolname, 'pgdrain_', ''), ',' ORDER BY r.rolname)
		                 FROM aclexplode(p.proacl) a JOIN pg_roles r ON r.oid = a.grantee
		                 WHERE a.privilege_type = 'EXECUTE' AND r.rolname LIKE 'pgdrain\_%'), '-'),
		       EXISTS (SELECT 1 FROM aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a WHERE a.grantee = 0)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'outbox'`)
	require.NoError(t, err)
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var sig, got string
		var public bool
		require.NoError(t, rows.Scan(&sig, &got, &public))
		require.False(t, public, "%s is executable by PUBLIC", sig)
		seen++
		if prepared.MatchString(sig) {
			kept++
			require.Equal(t, "invoker -", got, "%s: a statement with its plan kept (outbox._prepared)", sig)
			continue
		}
		if strings.HasPrefix(sig, "outbox.tg_queue__heads_q") {
			generated++
			require.Equal(t, "definer -", got, "%s: a queue's heads trigger function", sig)
			continue
		}
		if w, ok := want[sig]; ok {
			require.Equal(t, w, got, "%s: security and grants", sig)
			continue
		}
		require.Equal(t, "_", sig[len("outbox."):len("outbox.")+1], "%s: public function without a privilege decision here", sig)
		require.Equal(t, "invoker -", got, "%s: internal helpers run as invoker and are granted to nobody", sig)
	}
	require.NoError(t, rows.Err())
	require.Greater(t, seen, len(want))
	require.Equal(t, 1, generated, "the partitioned queue's heads trigger function")
	require.GreaterOrEqual(t, kept, 3, "the claim's, the record's and the head refresh's statements")
}

// prepared names a statement with its plan kept: outbox._q<queue id>_<hash>(...).
var prepared = regexp.MustCompile(`^outbox\._q[0-9]+_[0-9a-f]{24}\(`)
