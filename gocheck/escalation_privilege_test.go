package gocheck

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// loginPool returns a pool connected to db as a fresh login role that is a member of pgdrainRole
// and of nothing else (not a superuser, owns nothing), and checks that it is exactly that.
func loginPool(t *testing.T, db *testdb.DB, pgdrainRole string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, loginURL(t, db, pgdrainRole))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var super bool
	var roles []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT r.rolsuper, ARRAY(SELECT m.roleid::regrole::text
		FROM pg_auth_members m WHERE m.member = r.oid ORDER BY 1)
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&super, &roles))
	require.False(t, super)
	require.Equal(t, []string{pgdrainRole}, roles)
	return pool
}

// alrFingerprint hashes every row of every alr table and the ACLs of schema alr: equal
// fingerprints mean nothing a caller could reach changed.
func alrFingerprint(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var h string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT md5(concat_ws('|',
		(SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.id) FROM alr.alerts t),
		(SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.id) FROM alr.escalation_policies t),
		(SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.policy_id, t.step_idx) FROM alr.escalation_steps t),
		(SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.id) FROM alr.alert_escalations t),
		(SELECT string_agg(to_jsonb(t)::text, ',' ORDER BY t.id) FROM alr.delivery_journal t),
		(SELECT string_agg(p.oid::regprocedure::text || ':' || p.prosecdef || ':' || COALESCE(p.proacl::text, ''), ',' ORDER BY p.oid)
		   FROM pg_proc p WHERE p.pronamespace = 'alr'::regnamespace),
		(SELECT string_agg(c.relname || ':' || COALESCE(c.relacl::text, ''), ',' ORDER BY c.oid)
		   FROM pg_class c WHERE c.relnamespace = 'alr'::regnamespace)))`).Scan(&h))
	return h
}

// The escalation suite as the docs describe it (docs/security.md), with no superuser anywhere on
// the path: an operator writes the policy, a producer raises the alert and starts its ladder, and
// an engine whose login role is only a member of pgdrain_worker runs it — start-up channel check
// (alr.channels_in_use), takes with the alert's name (alr.alert_name), records, delivers,
// journals, gives back a step nobody serves, and after the producer resolves the alert delivers
// nothing more. No privilege error is logged on the way.
func TestEscalation_AsWorker_RunsTheLadderWithOnlyItsRole(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := testdb.New(t)
	operator := loginPool(t, db, "pgdrain_operator")
	producer := loginPool(t, db, "pgdrain_producer")
	worker := loginPool(t, db, "pgdrain_worker")

	var policy, smsPolicy, alert, ladder, smsLadder string
	require.NoError(t, operator.QueryRow(ctx, `SELECT alr.create_policy('on-call', '[
		{"delay": "0s", "channel": "telegram", "target": "@oncall"},
		{"delay": "200 milliseconds", "channel": "telegram", "target": "@lead"},
		{"delay": "1 hour", "channel": "telegram", "target": "@cto"}]')::text`).Scan(&policy))
	require.NoError(t, operator.QueryRow(ctx, `SELECT alr.create_policy('sms', '[
		{"delay": "0s", "channel": "sms", "target": "+380500000000"}]')::text`).Scan(&smsPolicy))
	require.NoError(t, producer.QueryRow(ctx, `SELECT alr.add_alert('payments 5xx')::text`).Scan(&alert))
	require.NoError(t, producer.QueryRow(ctx, `SELECT alr.start_escalation($1::uuid, $2::uuid)::text`, alert, policy).Scan(&ladder))
	require.NoError(t, producer.QueryRow(ctx, `SELECT alr.start_escalation($1::uuid, $2::uuid)::text`, alert, smsPolicy).Scan(&smsLadder))

	reg := prometheus.NewRegistry()
	logger, logs := newEscLog(t)
	telegram := &fakeTelegram{}
	engine, err := escalation.New(worker, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: telegram},
	}, escalation.Config{Tick: 20 * time.Millisecond, Logger: logger, Registerer: reg})
	require.NoError(t, err)
	runErr := make(chan error, 1)
	go func() { runErr <- engine.Run(ctx) }()

	require.Eventually(t, func() bool { return len(telegram.messages()) == 2 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		return escMetric(t, reg, "pgdrain_escalation_unserved_steps_total", map[string]string{"channel": "sms"}) >= 2
	}, 10*time.Second, 20*time.Millisecond, "the sms step is given back again and again, never applied")
	_, err = producer.Exec(ctx, `SELECT alr.resolve_alert($1::uuid)`, alert)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	cancel()
	require.NoError(t, <-runErr)

	require.Equal(t, []string{
		"@oncall: ALERT payments 5xx is firing (escalation step 1)",
		"@lead: ALERT payments 5xx is firing (escalation step 2)",
	}, telegram.messages(), "the alert's name came through alr.alert_name")
	require.Equal(t, map[string]int{ladder + ":0": 1, ladder + ":1": 1}, deliveriesPerStep(t, db.Pool))
	var smsStep int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT step_idx FROM alr.alert_escalations WHERE id = $1::uuid`, smsLadder).Scan(&smsStep))
	require.Equal(t, 0, smsStep, "the unserved step was never applied")

	log := logs.String()
	require.NotContains(t, log, "permission denied")
	require.NotContains(t, log, "42501")
	require.Contains(t, log, "channel=sms policies=1 running_ladders=1", "the start-up check ran as the worker")
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=ERROR") {
			require.Contains(t, line, "no notifier serves their channel", "the only errors are the unserved sms step")
		}
	}
}

// What pgdrain_worker (the engine's role), pgdrain_producer and pgdrain_operator can not do in
// schema alr: read or write any table directly (a worker could otherwise advance a ladder, clear a
// token or forge the journal with a plain UPDATE/INSERT), call the functions of another role or
// the internal _ helpers. Each attempt fails with 42501 and the fingerprint of schema alr (rows
// and ACLs) is unchanged.
func TestEscalation_RolesCanNotReachWhatIsNotTheirs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "telegram", "0s", "5 minutes")
	alert, ladder := firingAlert(t, db.Pool, "disk full", policy, time.Second)
	// A live lease with a token the attackers do not know.
	_, err := db.Pool.Exec(ctx, `SELECT * FROM alr.take_due_steps(1, '1 hour')`)
	require.NoError(t, err)
	before := alrFingerprint(t, db.Pool)

	tables := []string{"alr.alerts", "alr.escalation_policies", "alr.escalation_steps", "alr.alert_escalations", "alr.delivery_journal"}
	writes := []string{
		`UPDATE alr.alert_escalations SET step_idx = step_idx + 1, lease_token = NULL, leased_until = NULL`,
		`UPDATE alr.alert_escalations SET next_at = 'infinity'`,
		`DELETE FROM alr.alert_escalations`,
		fmt.Sprintf(`INSERT INTO alr.delivery_journal (escalation_id, alert_id, step_idx, channel, target, lease_token, outcome)
			VALUES ('%s', '%s', 0, 'telegram', 'x', gen_random_uuid(), 'delivered')`, ladder, alert),
		`UPDATE alr.alerts SET state = 'resolved', resolved_at = now()`,
		`INSERT INTO alr.escalation_steps (policy_id, step_idx, delay, channel, target) SELECT id, 9, '0s', 'x', 'y' FROM alr.escalation_policies`,
		`TRUNCATE alr.alert_escalations CASCADE`,
		`ALTER TABLE alr.alert_escalations ADD COLUMN x int`,
	}
	helpers := []string{
		`SELECT alr._invalid('f', 'm')`,
		`SELECT alr._not_found('f', 'a', 'w', gen_random_uuid())`,
		fmt.Sprintf(`SELECT alr._escalation_known('f', '%s', gen_random_uuid())`, ladder),
		`SELECT alr._is_blank(' ')`,
		`SELECT alr._shown('[]'::jsonb)`,
	}
	worker := []string{
		`SELECT * FROM alr.take_due_steps()`,
		fmt.Sprintf(`SELECT alr.apply_escalation('%s', gen_random_uuid())`, ladder),
		fmt.Sprintf(`SELECT alr.release_step('%s', gen_random_uuid())`, ladder),
		fmt.Sprintf(`SELECT alr.record_delivery('%s', 0, gen_random_uuid())`, ladder),
		fmt.Sprintf(`SELECT alr.alert_name('%s')`, alert),
	}
	raise := []string{
		`SELECT alr.add_alert('forged')`,
		fmt.Sprintf(`SELECT alr.start_escalation('%s', '%s')`, alert, policy),
	}
	resolve := []string{fmt.Sprintf(`SELECT alr.resolve_alert('%s')`, alert)}
	producer := append(append([]string{}, raise...), resolve...)
	operator := []string{
		`SELECT alr.create_policy('forged', '[{"delay":"0s","channel":"x","target":"y"}]')`,
	}
	reads := func() []string {
		var out []string
		for _, tbl := range tables {
			out = append(out, "SELECT * FROM "+tbl)
		}
		return out
	}()
	join := func(lists ...[]string) []string {
		var out []string
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	for _, c := range []struct {
		role    string
		refused []string
		allowed []string
	}{
		// The engine: its functions only; no table, no alert or policy writes.
		{"pgdrain_worker", join(reads, writes, helpers, producer, operator), append(worker, `SELECT * FROM alr.channels_in_use()`)},
		// The alert source: raise, start, resolve; it can not take or record steps.
		{"pgdrain_producer", join(reads, writes, helpers, worker, operator, []string{`SELECT * FROM alr.channels_in_use()`}), nil},
		// The operator: policies, reading the state and resolving an alert (the console); it can not
		// take, record, raise or write rows.
		{"pgdrain_operator", join(writes, helpers, worker, raise), join(reads, resolve, []string{`SELECT * FROM alr.channels_in_use()`})},
		// The reader (the console's pages): reading the state, nothing else.
		{"pgdrain_reader", join(writes, helpers, worker, producer, operator, []string{`SELECT * FROM alr.channels_in_use()`}), reads},
	} {
		pool := loginPool(t, db, c.role)
		for _, q := range c.refused {
			_, err := pool.Exec(ctx, q)
			code, msg := sqlState(err)
			require.Equal(t, "42501", code, "%s: %s must be refused, got %v (%s)", c.role, q, err, msg)
		}
		require.Equal(t, before, alrFingerprint(t, db.Pool), "%s changed nothing", c.role)
		for _, q := range c.allowed {
			// In a transaction rolled back: an allowed call (resolving an alert) changes nothing here.
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, q)
			code, _ := sqlState(err)
			require.NotEqual(t, "42501", code, "%s may run %s: %v", c.role, q, err)
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	// The worker's allowed calls with wrong tokens change nothing either (fencing, not privilege).
	w := loginPool(t, db, "pgdrain_worker")
	for _, q := range worker[1:3] {
		var ok bool
		require.NoError(t, w.QueryRow(ctx, q).Scan(&ok))
		require.False(t, ok, "%s with a token that is not ours", q)
	}
	require.Equal(t, before, alrFingerprint(t, db.Pool))
}

// Every function of schema alr has a decided mode and grant (docs/security.md): a new function
// fails this test until sql/privileges/alr.sql decides who may call it.
func TestEscalation_EveryAlrFunctionHasItsDecidedPrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	rows, err := db.Pool.Query(ctx, `
		SELECT p.oid::regprocedure::text, p.prosecdef,
		       ARRAY(SELECT r FROM unnest(ARRAY['PUBLIC', 'pgdrain_worker', 'pgdrain_producer', 'pgdrain_operator']) r
		             WHERE CASE r WHEN 'PUBLIC' THEN EXISTS (SELECT 1 FROM aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a
		                                                    WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
		                         ELSE has_function_privilege(r, p.oid, 'EXECUTE') END)
		FROM pg_proc p WHERE p.pronamespace = 'alr'::regnamespace ORDER BY 1`)
	require.NoError(t, err)
	type decision struct {
		definer bool
		callers []string
	}
	got := map[string]decision{}
	for rows.Next() {
		var sig string
		var d decision
		require.NoError(t, rows.Scan(&sig, &d.definer, &d.callers))
		sort.Strings(d.callers)
		got[sig] = d
	}
	require.NoError(t, rows.Err())
	worker, producer, operator := []string{"pgdrain_worker"}, []string{"pgdrain_producer"}, []string{"pgdrain_operator"}
	require.Equal(t, map[string]decision{
		"alr.take_due_steps(integer,interval)":        {true, worker},
		"alr.apply_escalation(uuid,uuid)":             {true, worker},
		"alr.release_step(uuid,uuid)":                 {true, worker},
		"alr.recorded_by(uuid,uuid)":                  {true, worker},
		"alr.unjournaled_steps(interval)":             {true, []string{"pgdrain_operator", "pgdrain_worker"}},
		"alr.record_delivery(uuid,integer,uuid,text)": {true, worker},
		"alr.alert_name(uuid)":                        {true, worker},
		"alr.channels_in_use()":                       {true, []string{"pgdrain_operator", "pgdrain_worker"}},
		"alr.add_alert(text)":                         {true, producer},
		"alr.start_escalation(uuid,uuid)":             {true, producer},
		"alr.resolve_alert(uuid)":                     {true, []string{"pgdrain_operator", "pgdrain_producer"}},
		"alr.create_policy(text,jsonb)":               {true, operator},
		"alr.version()":                               {false, []string{"pgdrain_operator", "pgdrain_producer", "pgdrain_worker"}},
		"alr.acknowledge_alert(uuid,text)":            {true, operator},
		"alr.resolved_alerts(integer)":                {true, operator},
		"alr._invalid(text,text)":                     {false, []string{}},
		"alr._not_found(text,text,text,uuid)":         {false, []string{}},
		"alr._escalation_known(text,uuid,uuid)":       {false, []string{}},
		"alr._check_span(text,text,interval)":         {false, []string{}},
		"alr._is_blank(text)":                         {false, []string{}},
		"alr._shown(jsonb)":                           {false, []string{}},
	}, got)
}

// Module alr migrated alone (no outbox) to its latest version has the roles and grants: an engine
// connected as a member of pgdrain_worker delivers.
func TestEscalation_AlrAloneGrantsTheWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	migrateTo(t, db, "alr", 0)

	_, ladder := firingAlert(t, db.Pool, "disk full", ladderPolicy(t, db.Pool, "telegram", "0s"), time.Second)
	worker := loginPool(t, db, "pgdrain_worker")
	logger, _ := newEscLog(t)
	telegram := &fakeTelegram{}
	engine, err := escalation.New(worker, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: telegram}}, escalation.Config{Logger: logger})
	require.NoError(t, err)
	res, err := engine.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, escalation.TickResult{Taken: 1, Delivered: 1}, res)
	require.Equal(t, map[string]int{ladder + ":0": 1}, deliveriesPerStep(t, db.Pool))
}
