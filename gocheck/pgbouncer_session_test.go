package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// pgbClaim is one row a claim returned.
type pgbClaim struct {
	id    int64
	key   string
	token pgtype.UUID
}

// pgbClaimBatch runs outbox.claim_batch on conn.
func pgbClaimBatch(t *testing.T, conn *pgx.Conn, n int) []pgbClaim {
	t.Helper()
	rows, err := conn.Query(context.Background(),
		`SELECT id, partition_key, lease_token FROM outbox.claim_batch('public.events', $1, '30 seconds')`, n)
	require.NoError(t, err)
	claims, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgbClaim, error) {
		var c pgbClaim
		return c, r.Scan(&c.id, &c.key, &c.token)
	})
	require.NoError(t, err)
	return claims
}

// The one piece of session state the SQL keeps, the claim cursor (pgdrain.claim_cursor_<queue_id>,
// where this session's last scan of fresh heads stopped, set with set_config(..., false) by
// outbox._claim), is inherited through PgBouncer's transaction pooling by the next client of the
// server connection: here two workers share PgBouncer's single server connection. Worker A claims
// the first five heads and gives three back, so they lie behind A's cursor; worker B starts from
// that cursor (it can read it: the setting is in its session now), so its first claim passes the
// given-back heads (while that cursor is under a second old) and finds them on a later claim,
// once too few heads are left past the cursor. All it costs is that rescan: B's claims hand out every row exactly once, a key's second row
// never before its first (the first rows of A's two kept keys stay leased to A and their second
// rows stay back), and the queue ends empty.
func TestPgBouncer_InheritedClaimCursorCostsOnlyARescan(t *testing.T) {
	t.Parallel()
	s := newPgbSetup(t, "resource_id", 1)
	const keys = 10
	for seq := range 2 {
		for k := range keys {
			s.q.enqueue(t, fmt.Sprintf("k%d", k), "op", seq)
		}
	}
	queueID := s.q.count(t, `SELECT queue_id FROM outbox.queues WHERE queue = 'public.events'`)
	ctx := context.Background()
	dsn := s.b.url(t, s.workerURL, map[string][]string{"default_query_exec_mode": {"exec"}})
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	a, b := connect(), connect()
	cursor := func(c *pgx.Conn) string {
		var v *string
		require.NoError(t, c.QueryRow(ctx, `SELECT current_setting($1, true)`,
			fmt.Sprintf("pgdrain.claim_cursor_%d", queueID)).Scan(&v))
		if v == nil {
			return ""
		}
		return *v
	}
	require.Empty(t, cursor(b), "no claim has run on the server connection yet")

	// A claims the heads of k0..k4 and gives k0..k2 back: they are claimable again, behind A's cursor.
	claimedA := pgbClaimBatch(t, a, 5)
	require.Len(t, claimedA, 5)
	for _, c := range claimedA[:3] {
		var ok bool
		require.NoError(t, a.QueryRow(ctx, `SELECT outbox.release('public.events', $1, $2)`, c.id, c.token).Scan(&ok))
		require.True(t, ok)
	}
	keptByA := map[string]bool{claimedA[3].key: true, claimedA[4].key: true}
	inherited := cursor(b)
	require.NotEmpty(t, inherited, "B's session carries the cursor A's claim set (one shared server connection)")

	// B claims five at a time, recording each batch as sent, until nothing is left for it.
	claimedBy := map[int64]int{}
	var order []pgbClaim
	for range 20 {
		batch := pgbClaimBatch(t, b, 5)
		if len(batch) == 0 {
			break
		}
		ids := make([]int64, len(batch))
		tokens := make([]pgtype.UUID, len(batch))
		outcomes := make([]string, len(batch))
		for i, c := range batch {
			claimedBy[c.id]++
			require.False(t, keptByA[c.key], "B claimed %s while its first row is leased to A", c.key)
			ids[i], tokens[i], outcomes[i] = c.id, c.token, "sent"
		}
		if len(order) == 0 {
			var ks []string
			for _, c := range batch {
				ks = append(ks, c.key)
			}
			t.Logf("B's first claim (cursor %q inherited from A): keys %v", inherited, ks)
		}
		order = append(order, batch...)
		_, err := b.Exec(ctx, `SELECT * FROM outbox.apply_results('public.events', $1, $2, $3)`, ids, tokens, outcomes)
		require.NoError(t, err)
	}
	// Every row but A's two leased heads and their successors, once each, first rows first.
	require.Len(t, order, 2*keys-4)
	seqOf := func(id int64) int64 {
		return s.q.count(t, `SELECT (payload->>'seq')::bigint FROM public.events WHERE id = $1`, id)
	}
	firstSeen := map[string]bool{}
	for _, c := range order {
		require.Equal(t, 1, claimedBy[c.id], "row %d claimed more than once", c.id)
		if seqOf(c.id) == 0 {
			firstSeen[c.key] = true
		} else {
			require.True(t, firstSeen[c.key], "key %s: second row claimed before the first", c.key)
		}
	}
	// A records its two; B then takes their successors, and the queue is empty.
	for _, c := range claimedA[3:] {
		_, err := a.Exec(ctx, `SELECT * FROM outbox.apply_results('public.events', $1, $2, $3)`,
			[]int64{c.id}, []pgtype.UUID{c.token}, []string{"sent"})
		require.NoError(t, err)
	}
	rest := pgbClaimBatch(t, b, 5)
	require.Len(t, rest, 2)
	for _, c := range rest {
		require.True(t, keptByA[c.key])
		require.EqualValues(t, 1, seqOf(c.id))
	}
}
