package gocheck

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// Validate rejects each bad config with an error that starts with the field name, and New
// refuses the same config.
func TestDrainer_Validate_RejectsEachBadConfig(t *testing.T) {
	t.Parallel()
	ok := drainer.Config{Table: "public.events"}
	require.NoError(t, ok.Validate(), "only Table is required")
	require.NoError(t, drainer.Config{Table: "events", ApplyTimeout: time.Second, Lease: 2*time.Second + time.Millisecond}.Validate())

	cases := []struct {
		name  string
		edit  func(*drainer.Config)
		field string
		says  string
	}{
		{"empty table", func(c *drainer.Config) { c.Table = "" }, "Table", "must be set"},
		{"table not a plain name", func(c *drainer.Config) { c.Table = "public.events; DROP TABLE x" }, "Table", "plain name"},
		{"negative batch size", func(c *drainer.Config) { c.BatchSize = -1 }, "BatchSize", "between 1 and 10000"},
		{"batch size above the SQL limit", func(c *drainer.Config) { c.BatchSize = 10001 }, "BatchSize", "got 10001"},
		{"negative poll fallback", func(c *drainer.Config) { c.PollFallback = -time.Second }, "PollFallback", "positive"},
		{"negative max attempts", func(c *drainer.Config) { c.MaxAttempts = -3 }, "MaxAttempts", "between 1 and 1000"},
		{"max attempts above the SQL limit", func(c *drainer.Config) { c.MaxAttempts = 1001 }, "MaxAttempts", "got 1001"},
		{"negative backoff min", func(c *drainer.Config) { c.BackoffMin = -time.Second }, "BackoffMin", "positive"},
		{"backoff max below min", func(c *drainer.Config) { c.BackoffMin, c.BackoffMax = 2*time.Second, time.Second }, "BackoffMax", "at least BackoffMin"},
		{"negative apply timeout", func(c *drainer.Config) { c.ApplyTimeout = -time.Second }, "ApplyTimeout", "positive"},
		{"negative apply concurrency", func(c *drainer.Config) { c.ApplyConcurrency = -2 }, "ApplyConcurrency", "between 1"},
		{"negative wedge threshold", func(c *drainer.Config) { c.WedgeWarnAfter = -time.Second }, "WedgeWarnAfter", "0 (off) or positive"},
		{"partition column expression", func(c *drainer.Config) { c.PartitionColumn = "payload->>'x'" }, "PartitionColumn", "plain column"},
		{"bad channel", func(c *drainer.Config) { c.Channel = "no spaces please" }, "Channel", "plain name"},
		{"retry policy with a partition column", func(c *drainer.Config) {
			c.PermanentPolicy, c.PartitionColumn = drainer.RetryPermanent, "resource_id"
		}, "PermanentPolicy", "not allowed with a PartitionColumn"},
		{"unknown policy", func(c *drainer.Config) { c.PermanentPolicy = 7 }, "PermanentPolicy", "PoisonPermanent or RetryPermanent"},
		{"lease equal to apply timeout plus margin", func(c *drainer.Config) {
			c.ApplyTimeout, c.Lease = time.Second, time.Second+drainer.LeaseMargin
		}, "Lease", "longer than ApplyTimeout"},
		{"lease shorter than apply timeout", func(c *drainer.Config) { c.ApplyTimeout, c.Lease = 5*time.Second, 3*time.Second }, "Lease", "longer than ApplyTimeout"},
		{"negative lease", func(c *drainer.Config) { c.Lease = -time.Second }, "Lease", "longer than ApplyTimeout"},
		{"lease over a day", func(c *drainer.Config) { c.Lease = 25 * time.Hour }, "Lease", "at most 24h"},
		{"unknown claim mode", func(c *drainer.Config) { c.ClaimMode = 9 }, "ClaimMode", "ClaimLease or ClaimLock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			require.Error(t, err)
			require.Truef(t, strings.HasPrefix(err.Error(), tc.field+" "), "error %q must start with the field name %s", err, tc.field)
			require.Contains(t, err.Error(), tc.says)
			_, err = drainer.New(drPoolForValidation(t), c, drDecode, func(context.Context, string, drEvent) error { return nil })
			require.Error(t, err, "New refuses what Validate rejects")
		})
	}
}

// drPoolForValidation is a pool that is never used (pgxpool connects lazily): New validates
// before touching the database.
func drPoolForValidation(t *testing.T) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), testdb.ServerURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Zero registry settings take the registered values; a set one that disagrees makes Run fail at
// start, naming the field and saying that the SQL registry wins; an unregistered queue is named.
func TestDrainer_Run_ChecksConfigAgainstTheRegistry(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id", maxAttempts: 5})
	noop := func(context.Context, string, drEvent) error { return nil }
	run := func(cfg drainer.Config) error {
		d, err := drainer.New(q.pool, cfg, drDecode, noop, drainer.WithLogger[drEvent](drLogger(t)))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return d.Run(ctx)
	}
	base := q.config(drainer.ClaimLease)

	require.NoError(t, run(base), "zero registry fields are filled from the registration")
	same := base
	same.MaxAttempts, same.BackoffMin, same.BackoffMax, same.PartitionColumn = 5, 50*time.Millisecond, 200*time.Millisecond, "resource_id"
	require.NoError(t, run(same), "values equal to the registration are fine")

	for _, tc := range []struct {
		edit func(*drainer.Config)
		want string
	}{
		{func(c *drainer.Config) { c.MaxAttempts = 10 }, "MaxAttempts is 10 but queue public.events is registered with max_attempts 5; the SQL registry wins"},
		{func(c *drainer.Config) { c.BackoffMin = time.Second }, "BackoffMin is 1s but queue public.events is registered with backoff_min 50ms"},
		{func(c *drainer.Config) { c.BackoffMax = time.Minute }, "BackoffMax is 1m0s but queue public.events is registered with backoff_max 200ms"},
		{func(c *drainer.Config) { c.PartitionColumn = "object" }, `PartitionColumn is "object" but queue public.events is registered with partition_column "resource_id"`},
		{func(c *drainer.Config) { c.Channel = "elsewhere" }, `Channel is "elsewhere" but queue public.events is registered with channel "pgdrain_public_events"`},
	} {
		cfg := base
		tc.edit(&cfg)
		err := run(cfg)
		require.Error(t, err)
		require.Contains(t, err.Error(), tc.want)
	}

	_, err := q.pool.Exec(context.Background(), `SELECT outbox.create_queue('public.loose', NULL, 3, '1 second', '30 seconds', 'retry')`)
	require.NoError(t, err)
	loose := base
	loose.Table = "public.loose"
	loose.PermanentPolicy = drainer.RetryPermanent
	require.NoError(t, run(loose), "RetryPermanent matches a 'retry' queue")
	loose.PartitionColumn = ""
	loose.Table = "public.events"
	err = run(loose)
	require.ErrorContains(t, err, "PermanentPolicy is retry but queue public.events is registered with permanent_policy poison")

	missing := base
	missing.Table = "public.nowhere"
	require.ErrorContains(t, run(missing), "queue public.nowhere is not registered (call outbox.create_queue first)")
}
