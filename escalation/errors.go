package escalation

import (
	"errors"

	"github.com/pgdrain/pgdrain/internal/version"
)

// ErrNoNotifier reports a channel that no Notifier of the engine serves. A step of such a channel
// is never applied: the engine gives it back with alr.release_step (the ladder does not advance),
// logs this error with the channel and counts the step in
// pgdrain_escalation_unserved_steps_total{channel}.
var ErrNoNotifier = errors.New("no notifier for the step's channel")

// ErrSchemaTooOld is matched (errors.Is) by the error Run returns when the database's alr schema is
// older than AlrMigrationNeeded, or predates alr.version(), or is not installed. The error says
// which migration the schema is at, which one the engine needs, and how to migrate.
var ErrSchemaTooOld = version.ErrSchemaTooOld

// AlrMigrationNeeded is the oldest alr migration this engine works with (Run checks alr.version()
// against it).
const AlrMigrationNeeded = version.AlrNeeded
