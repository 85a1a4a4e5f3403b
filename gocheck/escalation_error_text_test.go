package gocheck

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A channel's error is journaled whatever its text holds (NUL bytes, invalid UTF-8, megabytes):
// the failed delivery gets its journal row, with a recordable text of at most 4000 bytes. Before,
// the journal insert failed (SQLSTATE 22021) and the delivery went unjournaled.
func TestEscalation_UnrecordableChannelErrorIsJournaled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, ladder := firingAlert(t, db.Pool, "disk full", ladderPolicy(t, db.Pool, "pager", "0s"), time.Second)
	pager := escalation.NotifierFunc(func(context.Context, escalation.Step) error {
		return errors.New("pager said bad\x00request \xff" + strings.Repeat("日", 1<<20))
	})
	engine := newEngine(t, db.Pool, map[string]escalation.Notifier{"pager": pager}, escalation.Config{})
	res, err := engine.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, escalation.TickResult{Taken: 1, Failed: 1}, res)

	var outcome, text string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT outcome, error FROM alr.delivery_journal WHERE escalation_id = $1::uuid AND step_idx = 0`, ladder).
		Scan(&outcome, &text))
	require.Equal(t, "failed", outcome)
	prefix := "pager said bad\uFFFDrequest \uFFFD"
	require.Equal(t, prefix+strings.Repeat("日", (4000-len(prefix))/3), text)
}

// A channel's error whose text shows nothing (empty, white space, zero-width characters) is
// journaled as failed with a reason of the engine's: alr.record_delivery refuses a blank error
// (a failure needs its reason), which would cost the delivery its journal row.
func TestEscalation_ChannelErrorWithoutTextIsJournaledWithAReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	for _, text := range []string{"", " \t\n", "\u200b\u00a0"} {
		_, ladder := firingAlert(t, db.Pool, "disk full", ladderPolicy(t, db.Pool, "pager", "0s"), time.Second)
		pager := escalation.NotifierFunc(func(context.Context, escalation.Step) error { return errors.New(text) })
		engine := newEngine(t, db.Pool, map[string]escalation.Notifier{"pager": pager}, escalation.Config{})
		res, err := engine.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, escalation.TickResult{Taken: 1, Failed: 1}, res, "error %q", text)
		require.Equal(t, []string{"failed: the notifier failed without saying why (its error has no text)"},
			escJournaled(t, db.Pool, ladder, 0), "error %q", text)
	}
}
