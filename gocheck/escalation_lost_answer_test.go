package gocheck

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// droppingProxy forwards TCP connections to a server, except the first statement whose text
// contains trigger: with statementRuns it reaches the server, but its answer never reaches the
// client (the connection is closed a moment later, after the server has committed it); without,
// it never reaches the server (the connection is closed at once: a database that went away for a
// moment). Other connections are forwarded whole.
type droppingProxy struct {
	ln            net.Listener
	target        string
	trigger       []byte
	statementRuns bool
	fired         atomic.Bool
}

func startDroppingProxy(t *testing.T, target, trigger string, statementRuns bool) *droppingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &droppingProxy{ln: ln, target: target, trigger: []byte(trigger), statementRuns: statementRuns}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(client)
		}
	}()
	return p
}

func (p *droppingProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	var dropping atomic.Bool
	var once sync.Once
	closeBoth := func() { once.Do(func() { _ = client.Close(); _ = server.Close() }) }
	go func() { // server -> client, until this connection drops its answers
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 && !dropping.Load() {
				if _, werr := client.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		closeBoth()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if bytes.Contains(buf[:n], p.trigger) && p.fired.CompareAndSwap(false, true) {
				dropping.Store(true)
				if p.statementRuns {
					_, _ = server.Write(buf[:n])
					time.Sleep(300 * time.Millisecond) // the server commits; its answer goes nowhere
				}
				closeBoth()
				return
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	closeBoth()
	_, _ = io.Copy(io.Discard, client)
}

// droppedWorkerPool is a pool of a pgdrain_worker login of db through a droppingProxy of the
// first statement containing trigger (statementRuns: its answer dropped; else the statement).
func droppedWorkerPool(t *testing.T, db *testdb.DB, trigger string, statementRuns bool) (*pgxpool.Pool, *droppingProxy) {
	t.Helper()
	u, err := url.Parse(loginURL(t, db, "pgdrain_worker"))
	require.NoError(t, err)
	proxy := startDroppingProxy(t, u.Host, trigger, statementRuns)
	u.Host = proxy.ln.Addr().String()
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	// One message per statement (the text and its execution together), so the statement the proxy
	// lets through runs and commits; the extended protocol sends a statement's text to be prepared
	// first, whose answer the proxy would drop before anything ran.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, proxy
}

// An engine whose apply_escalation committed but whose answer was lost (the connection died after
// the commit) retries it, is refused (its token was cleared), and then delivers the step its token
// recorded (alr.recorded_by), once. Before, the step was recorded and never delivered: the page
// was lost, with only an Error in the log.
func TestEscalation_AStepWhoseApplyAnswerWasLostIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "telegram", "0s", "1 hour")
	_, ladder := firingAlert(t, db.Pool, "payments down", policy, time.Second)

	pool, proxy := droppedWorkerPool(t, db, "apply_escalation", true)

	telegram := &fakeTelegram{}
	engine := newEngine(t, pool, map[string]escalation.Notifier{"telegram": escalation.TelegramNotifier{Sender: telegram}},
		escalation.Config{DBTimeout: 5 * time.Second})
	res, err := engine.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, proxy.fired.Load(), "the apply's answer was dropped")
	require.Equal(t, 1, res.Delivered, "the step recorded by our token is delivered: %+v", res)
	require.Equal(t, []string{"telegram-0: ALERT payments down is firing (escalation step 1)"}, telegram.messages())
	require.Equal(t, map[string]int{ladder + ":0": 1}, deliveriesPerStep(t, db.Pool), "journaled once")

	res, err = engine.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Delivered, "nothing more is due")
	require.Len(t, telegram.messages(), 1, "delivered once")
}

// Against an alr schema before 00012 (no alr.recorded_by), the engine does not ask it: such a step
// stays recorded and undelivered, logged at Error as before, and no call fails for a missing
// function.
func TestEscalation_ALostApplyAnswerOnASchemaWithoutRecordedBy(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.New(t)
	exec(t, db.Pool, `DROP FUNCTION alr.recorded_by(uuid, uuid)`)
	exec(t, db.Pool, `CREATE OR REPLACE FUNCTION alr.version(OUT version text, OUT migration integer)
		LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT '0.1.0'::text, 11 $$`)
	policy := ladderPolicy(t, db.Pool, "telegram", "0s", "1 hour")
	firingAlert(t, db.Pool, "payments down", policy, time.Second)

	pool, proxy := droppedWorkerPool(t, db, "apply_escalation", true)

	var logs syncBuffer
	telegram := &fakeTelegram{}
	engine := newEngine(t, pool, map[string]escalation.Notifier{"telegram": escalation.TelegramNotifier{Sender: telegram}},
		escalation.Config{DBTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	res, err := engine.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, proxy.fired.Load())
	require.Zero(t, res.Delivered)
	require.Empty(t, telegram.messages())
	require.Contains(t, logs.String(), "may be recorded without delivery")
	require.NotContains(t, logs.String(), "recorded_by", "the missing function is not called")
}
