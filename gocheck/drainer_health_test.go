package gocheck

import (
	"context"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// A drainer's Health says when it last claimed and why its database calls fail: here a result
// flush refused because default_transaction_read_only was set on for the drainer's role while the
// event was at its peer (and the role's sessions replaced, as a DBA's pg_terminate_backend does).
// Health.Err is the refused flush and Health.Cause names the setting and the role, not a standby.
// Once the setting is lifted the flush, retried while its lease lasts, records the event and
// Health is clear again: the drainer's own sessions were replaced at the refusal, since a session
// keeps the setting it began with.
func TestDrainer_HealthSaysWhyResultsFail(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	q.enqueue(t, "k", "op", 0)
	login := loginURL(t, q.db, "pgdrain_worker")
	u, err := url.Parse(login)
	require.NoError(t, err)
	role := pgx.Identifier{u.User.Username()}.Sanitize()
	pool, err := pgxpool.New(ctx, login)
	require.NoError(t, err)
	defer pool.Close()

	cfg := q.config(drainer.ClaimLease)
	cfg.ApplyTimeout, cfg.Lease = 5*time.Second, 20*time.Second
	atPeer, release := make(chan struct{}), make(chan struct{})
	var applies atomic.Int32
	d, _ := drNew(t, pool, cfg, func(context.Context, string, drEvent) error {
		if applies.Add(1) == 1 {
			close(atPeer)
			<-release
		}
		return nil
	})
	require.Equal(t, drainer.Health{}, d.Health(), "before Run")
	stop := drStart(t, d)
	<-atPeer
	h := d.Health()
	require.NoError(t, h.Err)
	require.WithinDuration(t, time.Now(), h.LastClaim, 10*time.Second, "the claim of the event")

	_, err = q.db.Pool.Exec(ctx, "ALTER ROLE "+role+" SET default_transaction_read_only = on")
	require.NoError(t, err)
	pool.Reset()
	close(release)
	drWaitFor(t, 10*time.Second, "Health to report the refused write", func() bool { return d.Health().Err != nil })
	h = d.Health()
	require.ErrorContains(t, h.Err, "read-only transaction")
	require.Contains(t, h.Cause, "default_transaction_read_only = on, set for role "+role)
	require.NotContains(t, h.Cause, "standby")
	require.Zero(t, q.sent(t), "the result is not recorded while writes are refused")

	_, err = q.db.Pool.Exec(ctx, "ALTER ROLE "+role+" RESET default_transaction_read_only")
	require.NoError(t, err)
	drWaitFor(t, 15*time.Second, "the result recorded within its lease", func() bool { return q.sent(t) == 1 })
	require.EqualValues(t, 1, applies.Load(), "recorded by the retried flush, not delivered again")
	drWaitFor(t, 10*time.Second, "Health clear again", func() bool { return d.Health().Err == nil })
	require.Empty(t, d.Health().Cause)
	require.NoError(t, stop())
}
