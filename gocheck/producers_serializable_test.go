package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Two SERIALIZABLE producers of distinct keys, both open before either commits, both commit: the
// commit step reads what it shares with other producers by index, so its predicate locks do not
// make unrelated producers look like a read/write cycle (until 00019 a sequential scan of
// outbox.commit_hooks did, and 20 of 20 such pairs failed). Single-row transactions of keys with
// heads, of new keys, and of several keys, new and with heads; as pgdrain_producer. Keys that share a clock slot
// (hashtext(key) & 65535) share a clock row: the second commit fails with 40001 (pinned here; see
// docs/ordering.md), and the retry commits.
func TestProducers_SerializableProducersOfUnrelatedKeysCommit(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	exec(t, db.Pool, `INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'seed', '{}', 'old-' || g FROM generate_series(1, 100) g`)
	many := distinctSlotKeys(t, db.Pool, "many", 800)
	exec(t, db.Pool, `INSERT INTO public.events (event_type, payload, resource_id) SELECT 'seed', '{}', k FROM unnest($1::text[]) k`, many)
	forty := distinctSlotKeys(t, db.Pool, "forty", 800)
	producer := loginPool(t, db, "pgdrain_producer")
	serializable := pgx.TxOptions{IsoLevel: pgx.Serializable}
	insert := `INSERT INTO public.events (event_type, payload, resource_id) SELECT 'e', '{}', k FROM unnest($1::text[]) k`
	pair := func(keys1, keys2 []string) (error, error) {
		t.Helper()
		a, err := producer.BeginTx(ctx, serializable)
		require.NoError(t, err)
		defer func() { _ = a.Rollback(ctx) }()
		b, err := producer.BeginTx(ctx, serializable)
		require.NoError(t, err)
		defer func() { _ = b.Rollback(ctx) }()
		_, err = a.Exec(ctx, insert, keys1)
		require.NoError(t, err)
		_, err = b.Exec(ctx, insert, keys2)
		require.NoError(t, err)
		return a.Commit(ctx), b.Commit(ctx)
	}
	for i := range 10 {
		for _, c := range []struct {
			what         string
			keys1, keys2 []string
		}{
			{"one row of a key with a head", []string{fmt.Sprintf("old-%d", 2*i+1)}, []string{fmt.Sprintf("old-%d", 2*i+2)}},
			{"three keys each", []string{fmt.Sprintf("three-%d-a1", i), fmt.Sprintf("three-%d-a2", i), fmt.Sprintf("three-%d-a3", i)},
				[]string{fmt.Sprintf("three-%d-b1", i), fmt.Sprintf("three-%d-b2", i), fmt.Sprintf("three-%d-b3", i)}},
			{"a new key and a key with a head each", []string{fmt.Sprintf("mixed-%d-a", i), fmt.Sprintf("old-%d", 50+i)},
				[]string{fmt.Sprintf("mixed-%d-b", i), fmt.Sprintf("old-%d", 70+i)}},
			{"three keys with heads each", []string{fmt.Sprintf("old-%d", 21+i), fmt.Sprintf("old-%d", 31+i), fmt.Sprintf("old-%d", 41+i)},
				[]string{fmt.Sprintf("old-%d", 81+i), fmt.Sprintf("old-%d", 91+i), fmt.Sprintf("old-%d", 11+i)}},
			{"forty new keys each", forty[80*i : 80*i+40], forty[80*i+40 : 80*i+80]},
			{"forty keys with heads each", many[80*i : 80*i+40], many[80*i+40 : 80*i+80]},
			{"one row of a new key", []string{fmt.Sprintf("new-%d-a", i)}, []string{fmt.Sprintf("new-%d-b", i)}},
		} {
			err1, err2 := pair(c.keys1, c.keys2)
			require.NoError(t, err1, "%s, pair %d", c.what, i)
			require.NoError(t, err2, "%s, pair %d", c.what, i)
		}
	}

	// Two keys in one clock slot.
	var k1, k2 string
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT min(k), max(k) FROM (SELECT 'slot-' || g AS k FROM generate_series(1, 200000) g) s
		GROUP BY hashtext(k) & 65535 HAVING count(*) > 1 LIMIT 1`).Scan(&k1, &k2))
	err1, err2 := pair([]string{k1}, []string{k2})
	require.NoError(t, err1)
	code, _ := sqlState(err2)
	require.Equal(t, "40001", code, "keys %s and %s share a clock slot: %v", k1, k2, err2)
	require.NoError(t, pgx.BeginTxFunc(ctx, producer, serializable, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insert, []string{k2})
		return err
	}), "the retry commits")
}

// distinctSlotKeys returns n keys prefix-<i> no two of which share a clock slot (hashtext(key) &
// 65535): keys that do fail under SERIALIZABLE by design (the last part of the test above).
func distinctSlotKeys(t *testing.T, pool *pgxpool.Pool, prefix string, n int) []string {
	t.Helper()
	var keys []string
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT array_agg(k ORDER BY g) FROM (
		  SELECT g, k FROM (SELECT DISTINCT ON (hashtext(k) & 65535) g, k
		                    FROM (SELECT g, $1 || '-' || g AS k FROM generate_series(0, 4 * $2) g) a
		                    ORDER BY hashtext(k) & 65535, g) d
		  ORDER BY g LIMIT $2) s`, prefix, n).Scan(&keys))
	require.Len(t, keys, n)
	return keys
}
