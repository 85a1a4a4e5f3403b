package gocheck

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLI_WedgedAndPoisonedListRowsCreatedAtInfiniteTimes: created_at is an event column, so a
// producer (pgdrain_producer) may write 'infinity' or '-infinity' there with a plain INSERT, and an
// adopted table may allow NULL. pgdrain wedged and pgdrain poisoned failed the whole listing on
// such a row ("cannot scan -Infinity into *time.Time", exit 3): the operator saw no wedged key and
// no poisoned row exactly when one of them was such a row. They list it, the time at the nearer
// of years 1 and 9999 (what RFC 3339 and JSON can write).
func TestCLI_WedgedAndPoisonedListRowsCreatedAtInfiniteTimes(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	producer := loginAs(t, db, "pgdrain_producer")
	for _, row := range []struct{ key, at string }{{"minus", "-infinity"}, {"plus", "infinity"}} {
		_, err := producer.Exec(t.Context(), `INSERT INTO public.cli_events (event_type, payload, account_id, created_at)
			VALUES ('e', '{}', $1, $2::timestamptz)`, row.key, row.at)
		require.NoError(t, err, "a producer writes created_at %s", row.at)
	}
	cliExec(t, db.Pool, `ALTER TABLE public.cli_events ALTER COLUMN created_at DROP NOT NULL`)
	cliExec(t, db.Pool, `INSERT INTO public.cli_events (event_type, payload, account_id, created_at) VALUES ('e', '{}', 'none', NULL)`)
	// The rows of keys plus and none are poisoned by their peer.
	cliExec(t, db.Pool, `SELECT outbox.apply_result('public.cli_events', c.id, c.lease_token, 'permanent', 'rejected')
		FROM outbox.claim_batch('public.cli_events', 100) c WHERE c.partition_key IN ('plus', 'none')`)

	var wedged []struct {
		PartitionKey string `json:"partition_key"`
	}
	runCLIJSON(t, 1, &wedged, "wedged", "public.cli_events", "--older-than", "0s", "--limit", "100", "--dsn", db.URL)
	keys := []string{}
	for _, w := range wedged {
		keys = append(keys, w.PartitionKey)
	}
	require.Contains(t, keys, "minus", "pgdrain wedged lists the key whose head was created at -infinity")

	var poisoned []struct {
		PartitionKey string `json:"partition_key"`
		CreatedAt    string `json:"created_at"`
	}
	runCLIJSON(t, 1, &poisoned, "poisoned", "public.cli_events", "--dsn", db.URL)
	got := map[string]string{}
	for _, p := range poisoned {
		got[p.PartitionKey] = p.CreatedAt
	}
	require.Equal(t, map[string]string{"plus": "9999-12-31T23:59:59.999999Z", "none": "0001-01-01T00:00:00Z"}, got,
		"pgdrain poisoned lists the rows created at infinity and at no time")
	for _, c := range []struct {
		args []string
		code int // both exit 1 when they list something
	}{{[]string{"wedged", "public.cli_events", "--older-than", "0s"}, 1}, {[]string{"poisoned", "public.cli_events"}, 1}} {
		r := runCLI(t, append(c.args, "--dsn", db.URL)...)
		require.Equal(t, c.code, r.code, "pgdrain %v as text: %s", c.args, r.stderr)
	}
}
