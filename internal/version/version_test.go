package version

import (
	"errors"
	"fmt"
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

// Outside `go install` (go test has no module version) the binary reports Release.
func TestBinary_FallsBackToRelease(t *testing.T) {
	require.Equal(t, Release, Binary())
}
