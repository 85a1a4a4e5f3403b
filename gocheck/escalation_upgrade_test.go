package gocheck

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// The upgrade path of seed 000 (NetPulse 0073), over the development history (sql/history/alr):
// module alr at version 1 (leases without tokens) holds ladders — one with a live lease, one free,
// one ended — when 00002 adds lease_token with ADD COLUMN IF NOT EXISTS. Existing rows stay NULL
// (= free); the live lease keeps its deadline and gets a token on its first take after expiring; the
// fenced functions work on the old rows; the unfenced apply_escalation(uuid) is gone. The outbox
// module is never applied: alr stands alone.
func TestEscalation_UpgradeToLeaseToken_KeepsLiveLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty := testdb.NewEmpty(t)
	sqlDB, err := sql.Open("pgx", empty.URL)
	require.NoError(t, err)
	defer sqlDB.Close()
	provider := historyProvider(t, sqlDB, "alr")
	_, err = provider.UpTo(ctx, 1)
	require.NoError(t, err)

	pool := empty.Pool
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, q, args...)
		require.NoError(t, err)
	}
	var policy, live, free, ended string
	require.NoError(t, pool.QueryRow(ctx, `SELECT alr.create_policy('v1', '[{"delay":"0s","channel":"telegram","target":"@a"},{"delay":"0s","channel":"sms","target":"+1"}]')::text`).Scan(&policy))
	for _, id := range []*string{&live, &free, &ended} {
		require.NoError(t, pool.QueryRow(ctx, `SELECT alr.start_escalation(alr.add_alert('v1 alert'), $1::uuid)::text`, policy).Scan(id))
	}
	exec(`UPDATE alr.alert_escalations SET next_at = now() + interval '1 hour' WHERE id <> $1::uuid`, live)
	// Version 1's take: a live 2-minute lease with no token.
	var taken string
	require.NoError(t, pool.QueryRow(ctx, `SELECT escalation_id::text FROM alr.take_due_steps()`).Scan(&taken))
	require.Equal(t, live, taken)
	exec(`UPDATE alr.alert_escalations SET next_at = now() - interval '1 second' WHERE id = $1::uuid`, free)
	exec(`UPDATE alr.alert_escalations SET next_at = NULL, stopped_at = now(), stop_reason = 'completed' WHERE id = $1::uuid`, ended)

	// Up to 00003 (the journal), the last migration before privileges (00004) changed nothing here.
	_, err = provider.UpTo(ctx, 3)
	require.NoError(t, err)
	version, err := provider.GetDBVersion(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, version)

	var nullTokens int
	var liveLeaseKept bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE lease_token IS NULL),
		bool_or(id = $1::uuid AND leased_until > now()) FROM alr.alert_escalations`, live).Scan(&nullTokens, &liveLeaseKept))
	require.Equal(t, 3, nullTokens, "every existing row has a NULL token (free)")
	require.True(t, liveLeaseKept, "the live lease keeps its deadline across the upgrade")

	var outboxExists bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'outbox')`).Scan(&outboxExists))
	require.False(t, outboxExists, "module alr needs nothing from module outbox")

	_, err = pool.Exec(ctx, `SELECT alr.apply_escalation($1::uuid)`, live)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42883", pgErr.Code, "the unfenced apply_escalation(uuid) is gone: an old engine records nothing")

	// The free row is taken with a token; the live lease is not taken until it expires.
	var id, token string
	require.NoError(t, pool.QueryRow(ctx, `SELECT escalation_id::text, lease_token::text FROM alr.take_due_steps()`).Scan(&id, &token))
	require.Equal(t, free, id)
	require.NotEmpty(t, token)
	var applied bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT alr.apply_escalation($1::uuid, $2::uuid)`, id, token).Scan(&applied))
	require.True(t, applied, "the fenced apply records an old row taken after the upgrade")

	exec(`UPDATE alr.alert_escalations SET leased_until = now() - interval '1 second' WHERE id = $1::uuid`, live)
	var liveToken string
	require.NoError(t, pool.QueryRow(ctx, `SELECT escalation_id::text, lease_token::text FROM alr.take_due_steps()`).Scan(&id, &liveToken))
	require.Equal(t, live, id, "the formerly live lease is taken once it expired")
	require.NotEmpty(t, liveToken, "and gets its token on that take")
	require.NoError(t, pool.QueryRow(ctx, `SELECT alr.apply_escalation($1::uuid, $2::uuid)`, id, liveToken).Scan(&applied))
	require.True(t, applied)
	var stepIdx int
	require.NoError(t, pool.QueryRow(ctx, `SELECT step_idx FROM alr.alert_escalations WHERE id = $1::uuid`, live).Scan(&stepIdx))
	require.Equal(t, 1, stepIdx, "the ladder advanced to its second step")
}
