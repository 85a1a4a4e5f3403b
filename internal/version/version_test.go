package version

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The phrases pgdrain --version prints and the refusal the drainer and the engine return.
func TestSchemaAndTooOldError_Text(t *testing.T) {
	require.Equal(t, "0.1.0 (migration 00026)", Schema{Module: "outbox", Installed: true, Version: "0.1.0", Migration: 26}.String())
	require.Equal(t, "before migration 00006 (no alr.version())", Schema{Module: "alr", Installed: true}.String())
	require.Equal(t, "not installed", Schema{Module: "alr"}.String())

	err := fmt.Errorf("wrapped: %w", &TooOldError{Have: Schema{Module: "outbox", Installed: true, Version: "0.1.0", Migration: 25},
		Needed: 26, Client: "this drainer"})
	require.ErrorIs(t, err, ErrSchemaTooOld)
	var tooOld *TooOldError
	require.True(t, errors.As(err, &tooOld))
	require.Equal(t, "database schema outbox is at migration 00025, this drainer needs 00026 or later: "+
		"run goose-run up (cmd/goose-run), or apply the migrations/outbox/*.sql it lacks in order (docs/install.md)",
		tooOld.Error())
}

// A schema migrated part way through the development history (before the 0.1.0 baseline, which
// refuses it) is told to apply the rest of sql/history first, not to run goose-run up: with no
// version() (what Read returns for it) and with one older than the baseline. A database without
// the schema, which goose-run up installs, keeps the goose-run up hint.
func TestTooOldError_BeforeTheBaselinePointsToTheHistory(t *testing.T) {
	hint := func(module string, baseline int) string {
		return fmt.Sprintf("the 0.1.0 baseline (migration %05d) refuses a schema migrated part way through the history "+
			"before it; apply the rest of sql/history/%s first, then run goose-run up "+
			"(docs/install.md#databases-migrated-before-010)", baseline, module)
	}
	for _, c := range []struct {
		have TooOldError
		want string
	}{
		{TooOldError{Have: Schema{Module: "outbox", Installed: true}, Needed: 25, Client: "this drainer"},
			"database schema outbox predates migration 00025 (it has no outbox.version()), this drainer needs 00025 or later: " +
				hint("outbox", 25)},
		{TooOldError{Have: Schema{Module: "alr", Installed: true}, Needed: 6, Client: "this escalation engine"},
			"database schema alr predates migration 00006 (it has no alr.version()), this escalation engine needs 00006 or later: " +
				hint("alr", 6)},
		{TooOldError{Have: Schema{Module: "outbox", Installed: true, Version: "0.0.9", Migration: 24}, Needed: 25, Client: "this drainer"},
			"database schema outbox is at migration 00024, this drainer needs 00025 or later: " + hint("outbox", 25)},
		{TooOldError{Have: Schema{Module: "alr", Installed: true, Version: "0.0.9", Migration: 5}, Needed: 7, Client: "this console"},
			"database schema alr is at migration 00005, this console needs 00007 or later: " + hint("alr", 6)},
		{TooOldError{Have: Schema{Module: "outbox"}, Needed: 25, Client: "this drainer"},
			"database has no schema outbox, this drainer needs 00025 or later: run goose-run up (cmd/goose-run), " +
				"or apply the migrations/outbox/*.sql it lacks in order (docs/install.md)"},
	} {
		require.ErrorIs(t, &c.have, ErrSchemaTooOld)
		require.Equal(t, c.want, c.have.Error())
	}
	install, err := os.ReadFile("../../docs/install.md")
	require.NoError(t, err)
	require.Contains(t, string(install), "\n## Databases migrated before 0.1.0\n",
		"the error names the section by its anchor, databases-migrated-before-010")
}

// Outside `go install` (go test has no module version) the binary reports Release.
func TestBinary_FallsBackToRelease(t *testing.T) {
	require.Equal(t, Release, Binary())
}
