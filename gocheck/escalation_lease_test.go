package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

type tickOutcome struct {
	res escalation.TickResult
	err error
}

// The seed's scenario: a batch slower than its lease because one channel hangs. Engine A takes
// three steps (lease shortened to 1s), records the first and hangs delivering it; the lease of
// the other two runs out; engine B retakes them with new tokens and delivers them; when A gets to
// them its apply_escalation returns false and A delivers nothing. Exactly one delivery per step.
func TestEscalation_BatchSlowerThanLease_EachStepDeliveredOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	pager := newHangingChannel()
	defer pager.unblock()
	telegramA, telegramB := &fakeTelegram{}, &fakeTelegram{}

	slow := ladderPolicy(t, db.Pool, "pager", "0s")
	fast := ladderPolicy(t, db.Pool, "telegram", "0s")
	_, e1 := firingAlert(t, db.Pool, "db primary down", slow, 3*time.Second)
	_, e2 := firingAlert(t, db.Pool, "replica lag", fast, 2*time.Second)
	_, e3 := firingAlert(t, db.Pool, "disk full", fast, 1*time.Second)

	cfg := escalation.Config{Lease: time.Second, StepTimeout: 30 * time.Second}
	engineA := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"pager": pager, "telegram": escalation.TelegramNotifier{Sender: telegramA}}, cfg)
	engineB := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"pager": pager, "telegram": escalation.TelegramNotifier{Sender: telegramB}}, cfg)

	doneA := make(chan tickOutcome, 1)
	go func() {
		res, err := engineA.RunOnce(ctx)
		doneA <- tickOutcome{res, err}
	}()
	require.Equal(t, e1, pager.waitEntered(t).EscalationID, "A delivers the batch in next_at order")

	waitLeasesExpired(t, db.Pool)
	resB, err := engineB.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, escalation.TickResult{Taken: 2, Delivered: 2}, resB,
		"B retakes the two steps whose lease expired under A and delivers them")

	pager.unblock()
	outA := <-doneA
	require.NoError(t, outA.err)
	require.Equal(t, escalation.TickResult{Taken: 3, Delivered: 1, NotOurs: 2}, outA.res,
		"A's late applies return false: it delivers only the step it recorded")
	require.Empty(t, telegramA.messages(), "A sent nothing for the retaken steps")
	require.Len(t, telegramB.messages(), 2)

	require.Equal(t, map[string]int{e1 + ":0": 1, e2 + ":0": 1, e3 + ":0": 1}, deliveriesPerStep(t, db.Pool),
		"the journal has exactly one delivery per step")
	var stopped int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM alr.alert_escalations
		WHERE stop_reason = 'completed' AND leased_until IS NULL AND lease_token IS NULL`).Scan(&stopped))
	require.Equal(t, 3, stopped, "every one-step ladder ended, with no lease left behind")
}

// An engine that dies right after taking leaves its steps leased with tokens nobody will use. No
// one can take them while the lease lasts; after it, the next engine takes them with new tokens and
// delivers each exactly once.
func TestEscalation_EngineDiesAfterTaking_StepsRetakenAndDeliveredOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "telegram", "0s")
	var ids []string
	for i, name := range []string{"a", "b", "c"} {
		_, id := firingAlert(t, db.Pool, name, policy, time.Duration(3-i)*time.Second)
		ids = append(ids, id)
	}

	// The engine that dies: its take commits, then the process is gone (no apply, no release).
	rows, err := db.Pool.Query(ctx, `SELECT lease_token::text FROM alr.take_due_steps(100, '1 second')`)
	require.NoError(t, err)
	var deadTokens []string
	for rows.Next() {
		var tok string
		require.NoError(t, rows.Scan(&tok))
		deadTokens = append(deadTokens, tok)
	}
	require.NoError(t, rows.Err())
	require.Len(t, deadTokens, 3)

	telegram := &fakeTelegram{}
	survivor := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: telegram}}, escalation.Config{Lease: time.Second})
	res, err := survivor.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, escalation.TickResult{}, res, "while the dead engine's leases last, nothing is taken")

	waitLeasesExpired(t, db.Pool)
	res, err = survivor.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, escalation.TickResult{Taken: 3, Delivered: 3}, res, "after the lease the steps are retaken")
	res, err = survivor.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, escalation.TickResult{}, res, "and not taken again")

	require.Len(t, telegram.messages(), 3)
	require.Equal(t, map[string]int{ids[0] + ":0": 1, ids[1] + ":0": 1, ids[2] + ":0": 1}, deliveriesPerStep(t, db.Pool))
	for _, e := range journal(t, db.Pool) {
		require.NotContains(t, deadTokens, e.LeaseToken, "the deliveries belong to the retaking takes")
	}
}

// An alert resolved while its steps wait in a batch gets no delivery: apply_escalation sees the
// stopped ladder and returns false; both of its ladders stay stopped. The other steps go out.
func TestEscalation_AlertResolvedMidBatch_NoDeliveryForItsSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	pager := newHangingChannel()
	defer pager.unblock()
	telegram := &fakeTelegram{}

	slow := ladderPolicy(t, db.Pool, "pager", "0s")
	fastA := ladderPolicy(t, db.Pool, "telegram", "0s", "5m")
	fastB := ladderPolicy(t, db.Pool, "telegram", "0s")
	_, first := firingAlert(t, db.Pool, "first", slow, 4*time.Second)
	resolved, r1 := firingAlert(t, db.Pool, "resolved soon", fastA, 3*time.Second)
	r2 := startLadder(t, db.Pool, resolved, fastB, 2*time.Second)
	_, last := firingAlert(t, db.Pool, "last", fastB, 1*time.Second)

	engine := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"pager": pager, "telegram": escalation.TelegramNotifier{Sender: telegram}}, escalation.Config{})
	done := make(chan tickOutcome, 1)
	go func() {
		res, err := engine.RunOnce(ctx)
		done <- tickOutcome{res, err}
	}()
	pager.waitEntered(t)
	_, err := db.Pool.Exec(ctx, `SELECT alr.resolve_alert($1::uuid)`, resolved)
	require.NoError(t, err)
	pager.unblock()

	out := <-done
	require.NoError(t, out.err)
	require.Equal(t, escalation.TickResult{Taken: 4, Delivered: 2, NotOurs: 2}, out.res)
	require.Equal(t, []string{"telegram-0: ALERT last is firing (escalation step 1)"}, telegram.messages(),
		"only the other alert's step went out")
	require.Equal(t, map[string]int{first + ":0": 1, last + ":0": 1}, deliveriesPerStep(t, db.Pool),
		"the resolved alert's steps have no journal row")

	var stopped int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM alr.alert_escalations
		WHERE id IN ($1::uuid, $2::uuid) AND stopped_at IS NOT NULL AND stop_reason = 'resolved'
		  AND step_idx = 0 AND next_at IS NULL`, r1, r2).Scan(&stopped))
	require.Equal(t, 2, stopped, "both ladders of the resolved alert are stopped at step 0")
}
