package gocheck

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// Poisoned rows that do not share one attempt_count (1,200 poisoned at max_attempts 10, then the
// queue lowered to 3 and one more poisoned at 3) are all listed, across pages of 1,000, and found by
// key: outbox.poisoned_rows paged by id below a sort by attempt_count and skipped the newest row,
// so `pgdrain poisoned --key victim` said there was none and `requeue --key victim` requeued
// nothing. The table prints what producers and peers wrote with terminal escapes as text.
func TestCLI_PoisonedListsEveryRowWhateverTheAttemptCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `
		SELECT outbox.create_queue('public.pq', 'k', max_attempts => 10);
		INSERT INTO public.pq (event_type, payload, k) SELECT 'e', '{}', 'a' || (g % 7) FROM generate_series(1, 1200) g;
		UPDATE public.pq SET attempt_count = 10, last_error = 'old';
		SELECT outbox.create_queue('public.pq', 'k', max_attempts => 3);
		INSERT INTO public.pq (event_type, payload, k) VALUES ('e', '{}', E'victim\x1b[31m');
		UPDATE public.pq SET attempt_count = 3, last_error = E'peer said\r\x1b[2Kall good' WHERE k LIKE 'victim%';`)
	require.NoError(t, err)

	var all []struct {
		ID int64 `json:"id"`
	}
	runCLIJSON(t, cli.ExitProblems, &all, "poisoned", "public.pq", "--limit", "5000", "--dsn", db.URL)
	require.Len(t, all, 1201, "every poisoned row, across two pages")
	seen := map[int64]bool{}
	for _, r := range all {
		require.False(t, seen[r.ID], "row %d listed twice", r.ID)
		seen[r.ID] = true
	}

	r := runCLI(t, "poisoned", "public.pq", "--key", "victim\x1b[31m", "--dsn", db.URL)
	require.Equal(t, cli.ExitProblems, r.code, "the key's poisoned row is found: %s%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, `victim\x1b[31m`)
	require.Contains(t, r.stdout, `peer said\x0d\x1b[2Kall good`)
	require.False(t, strings.ContainsAny(r.stdout, "\x1b\r"), "no terminal control character is printed as it is")

	r = runCLI(t, "requeue", "public.pq", "--key", "victim\x1b[31m", "--dsn", db.URL)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "requeued 1 poisoned row(s)")
}
