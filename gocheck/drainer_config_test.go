package gocheck

import (
	"context"
	"math"
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
	// The default ClaimTimeout (10s) shrinks to a shorter lease, so a short Lease alone stays valid.
	require.NoError(t, drainer.Config{Table: "events", ApplyTimeout: 100 * time.Millisecond, Lease: 2 * time.Second}.Validate())

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
		{"negative max attempts", func(c *drainer.Config) { c.ExpectMaxAttempts = -3 }, "ExpectMaxAttempts", "between 1 and 1000"},
		{"max attempts above the SQL limit", func(c *drainer.Config) { c.ExpectMaxAttempts = 1001 }, "ExpectMaxAttempts", "got 1001"},
		{"negative backoff min", func(c *drainer.Config) { c.ExpectBackoffMin = -time.Second }, "ExpectBackoffMin", "positive"},
		{"backoff max below min", func(c *drainer.Config) { c.ExpectBackoffMin, c.ExpectBackoffMax = 2*time.Second, time.Second }, "ExpectBackoffMax", "at least ExpectBackoffMin"},
		{"negative apply timeout", func(c *drainer.Config) { c.ApplyTimeout = -time.Second }, "ApplyTimeout", "positive"},
		{"apply timeout over a day", func(c *drainer.Config) { c.ApplyTimeout = 1000 * time.Hour }, "ApplyTimeout", "at most 24h0m0s, got 1000h0m0s"},
		{"apply timeout whose doubling overflows", func(c *drainer.Config) { c.ApplyTimeout = time.Duration(math.MaxInt64/2 + 1) }, "ApplyTimeout", "at most 24h0m0s"},
		{"apply timeout whose default lease is over a day", func(c *drainer.Config) { c.ApplyTimeout = 13 * time.Hour }, "Lease",
			"its default 2*ApplyTimeout + LeaseMargin = 26h0m1s: lower ApplyTimeout or set Lease"},
		{"apply timeout whose default lock transaction is over a day", func(c *drainer.Config) {
			c.ClaimMode, c.ApplyTimeout = drainer.ClaimLock, time.Hour
		}, "LockTransactionTimeout", "at most 24h0m0s, got its default"},
		{"negative apply concurrency", func(c *drainer.Config) { c.ApplyConcurrency = -2 }, "ApplyConcurrency", "between 1"},
		{"negative wedge threshold", func(c *drainer.Config) { c.WedgeWarnAfter = -time.Second }, "WedgeWarnAfter", "0 (off) or positive"},
		{"partition column expression", func(c *drainer.Config) { c.ExpectPartitionColumn = "payload->>'x'" }, "ExpectPartitionColumn", "plain column"},
		{"bad channel", func(c *drainer.Config) { c.ExpectChannel = "no spaces please" }, "ExpectChannel", "plain name"},
		{"retry policy with a partition column", func(c *drainer.Config) {
			c.ExpectPermanentPolicy, c.ExpectPartitionColumn = drainer.RetryPermanent, "resource_id"
		}, "ExpectPermanentPolicy", "cannot hold with an ExpectPartitionColumn"},
		{"unknown policy", func(c *drainer.Config) { c.ExpectPermanentPolicy = 7 }, "ExpectPermanentPolicy", "PoisonPermanent or RetryPermanent"},
		{"lease equal to apply timeout plus margin", func(c *drainer.Config) {
			c.ApplyTimeout, c.Lease = time.Second, time.Second+drainer.LeaseMargin
		}, "Lease", "longer than ApplyTimeout"},
		{"lease shorter than apply timeout", func(c *drainer.Config) { c.ApplyTimeout, c.Lease = 5*time.Second, 3*time.Second }, "Lease", "longer than ApplyTimeout"},
		{"negative lease", func(c *drainer.Config) { c.Lease = -time.Second }, "Lease", "longer than ApplyTimeout"},
		{"lease over a day", func(c *drainer.Config) { c.Lease = 25 * time.Hour }, "Lease", "at most 24h"},
		{"trickle interval over a second", func(c *drainer.Config) { c.TrickleInterval = 2 * time.Second }, "TrickleInterval", "at most MaxTrickleInterval (1s)"},
		{"unknown claim mode", func(c *drainer.Config) { c.ClaimMode = 9 }, "ClaimMode", "ClaimLease or ClaimLock"},
		{"async results in lock mode", func(c *drainer.Config) { c.ClaimMode, c.AsyncResults = drainer.ClaimLock, true }, "AsyncResults", "lease mode only"},
		{"negative claim timeout", func(c *drainer.Config) { c.ClaimTimeout = -time.Second }, "ClaimTimeout", "positive"},
		{"claim timeout too short to answer", func(c *drainer.Config) { c.ClaimTimeout = time.Microsecond }, "ClaimTimeout",
			"at least MinClaimTimeout (100ms) (or 0 for the default), got 1µs"},
		{"poll fallback of a nanosecond", func(c *drainer.Config) { c.PollFallback = time.Nanosecond }, "PollFallback",
			"at least MinPollFallback (100ms), got 1ns"},
		{"wedge threshold of a nanosecond", func(c *drainer.Config) { c.WedgeWarnAfter = time.Nanosecond }, "WedgeWarnAfter",
			"0 (off) or at least MinWedgeWarnAfter (100ms), got 1ns"},
		{"claim timeout longer than the lease", func(c *drainer.Config) { c.Lease, c.ClaimTimeout = 11*time.Second, 12*time.Second }, "ClaimTimeout", "at most Lease (11s)"},
		{"claim timeout longer than the lock transaction", func(c *drainer.Config) {
			c.ClaimMode, c.LockTransactionTimeout, c.ClaimTimeout = drainer.ClaimLock, 3*time.Minute, 4*time.Minute
		}, "ClaimTimeout", "at most LockTransactionTimeout (3m0s)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			require.Error(t, err)
			require.Truef(t, strings.HasPrefix(err.Error(), tc.field+" "), "error %q must start with the field name %s", err, tc.field)
			require.Contains(t, err.Error(), tc.says)
			require.Len(t, strings.Split(err.Error(), "\n"), 1, "one problem, reported once: %v", err)
			_, err = drainer.New(drPoolForValidation(t), c, drDecode, func(context.Context, string, drEvent) error { return nil })
			require.Error(t, err, "New refuses what Validate rejects")
		})
	}
}

// The public default helpers take a non-positive argument as its default and saturate instead of
// overflowing (DefaultLease(math.MaxInt64) was about a second).
func TestDrainer_DefaultHelpersNeitherOverflowNorGoNegative(t *testing.T) {
	t.Parallel()
	require.Equal(t, drainer.DefaultLease(0), drainer.DefaultLease(-5))
	require.Equal(t, 2*drainer.DefaultApplyTimeout+drainer.LeaseMargin, drainer.DefaultLease(-5))
	require.Equal(t, time.Duration(math.MaxInt64), drainer.DefaultLease(math.MaxInt64))
	require.Equal(t, drainer.DefaultLockTransactionTimeout(0, 0, 0), drainer.DefaultLockTransactionTimeout(-5, -5, -5))
	require.Equal(t, 161*time.Second, drainer.DefaultLockTransactionTimeout(-5, -5, -5))
	require.Equal(t, time.Duration(math.MaxInt64), drainer.DefaultLockTransactionTimeout(32, 1, math.MaxInt64))
}

// drPoolForValidation is a pool that is never used (pgxpool connects lazily): New validates
// before touching the database.
func drPoolForValidation(t *testing.T) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), testdb.ServerURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Zero Expect fields accept the registration; a set one that disagrees makes Run fail at start
// (ErrRegistrationMismatch), naming the field and the registered value; an unregistered queue is
// named.
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

	require.NoError(t, run(base), "zero Expect fields expect nothing")
	same := base
	same.ExpectMaxAttempts, same.ExpectBackoffMin, same.ExpectBackoffMax, same.ExpectPartitionColumn = 5, 50*time.Millisecond, 200*time.Millisecond, "resource_id"
	same.ExpectPermanentPolicy, same.ExpectChannel = drainer.PoisonPermanent, "pgdrain_public_events"
	require.NoError(t, run(same), "values equal to the registration are fine")

	for _, tc := range []struct {
		edit func(*drainer.Config)
		want string
	}{
		{func(c *drainer.Config) { c.ExpectMaxAttempts = 10 }, "ExpectMaxAttempts is 10 but queue public.events is registered with max_attempts 5: the SQL functions apply the registration"},
		{func(c *drainer.Config) { c.ExpectBackoffMin = time.Second }, "ExpectBackoffMin is 1s but queue public.events is registered with backoff_min 50ms"},
		{func(c *drainer.Config) { c.ExpectBackoffMax = time.Minute }, "ExpectBackoffMax is 1m0s but queue public.events is registered with backoff_max 200ms"},
		{func(c *drainer.Config) { c.ExpectPartitionColumn = "object" }, `ExpectPartitionColumn is "object" but queue public.events is registered with partition_column "resource_id"`},
		{func(c *drainer.Config) { c.ExpectChannel = "elsewhere" }, `ExpectChannel is "elsewhere" but queue public.events is registered with channel "pgdrain_public_events"`},
	} {
		cfg := base
		tc.edit(&cfg)
		err := run(cfg)
		require.ErrorIs(t, err, drainer.ErrRegistrationMismatch)
		require.Contains(t, err.Error(), tc.want)
	}

	_, err := q.pool.Exec(context.Background(), `SELECT outbox.create_queue('public.loose', NULL, 3, '1 second', '30 seconds', 'retry')`)
	require.NoError(t, err)
	loose := base
	loose.Table = "public.loose"
	loose.ExpectPermanentPolicy = drainer.RetryPermanent
	require.NoError(t, run(loose), "RetryPermanent matches a 'retry' queue")
	loose.ExpectPartitionColumn = ""
	loose.Table = "public.events"
	err = run(loose)
	require.ErrorContains(t, err, "ExpectPermanentPolicy is retry but queue public.events is registered with permanent_policy poison")
	loose.ExpectPermanentPolicy = drainer.PoisonPermanent
	loose.Table = "public.loose"
	require.ErrorContains(t, run(loose), "ExpectPermanentPolicy is poison but queue public.loose is registered with permanent_policy retry",
		"PoisonPermanent is an expectation too, not a zero value that accepts anything")

	missing := base
	missing.Table = "public.nowhere"
	require.ErrorContains(t, run(missing), "queue public.nowhere is not registered (call outbox.create_queue first)")
}
