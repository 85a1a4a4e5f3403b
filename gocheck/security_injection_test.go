package gocheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// injectionFixture: a partitioned queue with rows and a table the attacks try to drop.
func injectionFixture(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), `
		SELECT outbox.create_queue('public.events', 'resource_id');
		SELECT outbox.enqueue('public.events', 'created', '{}', 'k' || g) FROM generate_series(1, 3) g;
		CREATE TABLE public.victim (x int);`)
	require.NoError(t, err)
	return db
}

var injectedIdentifiers = []string{
	`public.events; DROP TABLE public.victim; --`,
	`public.events" ; DROP TABLE public.victim; --`,
	`events'); DROP TABLE public.victim; --`,
	`public.events/**/`,
	`public."events"`,
	`pg_catalog.pg_authid; SELECT 1`,
}

// Every text argument that names something (queue, partition column, channel) or selects
// behaviour (outcome) refuses SQL with 22023 and changes nothing.
func TestSecurity_InjectionThroughNamesFailsCleanly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := injectionFixture(t)

	queueCalls := []string{
		`SELECT outbox.create_queue($1)`,
		`SELECT outbox.drop_queue($1, true)`,
		`SELECT outbox.enqueue($1, 'e', '{}', 'k1')`,
		`SELECT * FROM outbox.claim_batch($1)`,
		`SELECT * FROM outbox.claim_locked($1)`,
		`SELECT outbox.apply_result($1, 1, gen_random_uuid(), 'sent')`,
		`SELECT * FROM outbox.apply_results($1, '{1}', ARRAY[gen_random_uuid()], '{sent}')`,
		`SELECT outbox.settle_locked($1, '{1}', '{sent}')`,
		`SELECT outbox.extend_lease($1, 1, gen_random_uuid(), '1 minute')`,
		`SELECT outbox.release($1, 1, gen_random_uuid())`,
		`SELECT * FROM outbox.stats($1)`,
		`SELECT * FROM outbox.wedged_partitions($1, '1 second')`,
		`SELECT * FROM outbox.check_indexes($1)`,
		`SELECT outbox.requeue_poisoned($1)`,
		`SELECT outbox.purge_sent($1)`,
	}
	type attack struct{ sql, arg string }
	var attacks []attack
	for _, call := range queueCalls {
		for _, bad := range injectedIdentifiers {
			attacks = append(attacks, attack{call, bad})
		}
	}
	for _, bad := range []string{
		`resource_id; DROP TABLE public.victim`,
		`resource_id" text); DROP TABLE public.victim; --`,
		`x text) ; DROP TABLE public.victim; --`,
		`"resource_id"`,
	} {
		attacks = append(attacks, attack{`SELECT outbox.create_queue('public.other', $1)`, bad})
	}
	for _, bad := range []string{
		`ch'); DROP TABLE public.victim; --`,
		`ch; NOTIFY other`,
		`"ch"`,
		`ch$$; DROP TABLE public.victim; $$`,
	} {
		attacks = append(attacks, attack{`SELECT outbox.create_queue('public.other', channel => $1)`, bad})
	}
	for _, bad := range []string{`sent'; DROP TABLE public.victim; --`, `sent' OR 'a' = 'a`} {
		attacks = append(attacks,
			attack{`SELECT outbox.apply_result('public.events', 1, gen_random_uuid(), $1)`, bad},
			attack{`SELECT * FROM outbox.apply_results('public.events', '{1}', ARRAY[gen_random_uuid()], ARRAY[$1])`, bad},
			attack{`SELECT outbox.settle_locked('public.events', '{1}', ARRAY[$1])`, bad})
	}

	before := stateFingerprint(t, db.Pool)
	for _, a := range attacks {
		_, err := db.Pool.Exec(ctx, a.sql, a.arg)
		code, msg := sqlState(err)
		require.Equal(t, "22023", code, "%s with %q must fail with 22023, got %v", a.sql, a.arg, err)
		require.NotEmpty(t, msg)
		require.Equal(t, before, stateFingerprint(t, db.Pool), "%s with %q changed something", a.sql, a.arg)
	}
}

// Event types, partition keys and error texts are data: SQL in them is stored verbatim, never run.
func TestSecurity_InjectionThroughDataIsStoredVerbatim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := injectionFixture(t)
	const evil = `x'); DROP TABLE public.victim; --`

	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT outbox.enqueue('public.events', $1, '{}', $1)`, evil).Scan(&id))
	var token [16]byte
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT lease_token FROM outbox.claim_batch('public.events', 10) WHERE id = $1`, id).Scan(&token))
	var applied bool
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT outbox.apply_result('public.events', $1, $2, 'transient', $3)`, id, token, evil).Scan(&applied))
	require.True(t, applied)

	var eventType, key, lastError string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT event_type, resource_id, last_error FROM public.events WHERE id = $1`, id).Scan(&eventType, &key, &lastError))
	require.Equal(t, []string{evil, evil, evil}, []string{eventType, key, lastError})
	var victim bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT to_regclass('public.victim') IS NOT NULL`).Scan(&victim))
	require.True(t, victim)
	var heads int
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT count(*) FROM outbox.partition_heads WHERE partition_key = $1`, evil).Scan(&heads))
	require.Equal(t, 1, heads, "the evil key is an ordinary partition")
}
