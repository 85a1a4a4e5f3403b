// Package version says which version of pgdrain runs: the binary's (Binary) and the SQL schemas'
// of a database (outbox.version(), alr.version(): Read), and refuses a schema older than a client
// needs (Check), naming the migration to run.
package version

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Release is the release this source tree builds. A binary built outside `go install` of a tagged
// module reports it (Binary); the SQL functions outbox.version() and alr.version() return the same
// text (a test compares them).
const Release = "0.1.0"

// Migrations the Go clients need. A client that starts calling something a later migration adds
// raises its number here; it can not be lower than the migration that added the schema's version()
// function (there is nothing to read before it).
const (
	// OutboxNeeded is the oldest outbox migration the drainer (and so the relay) works with:
	// 00025 added outbox.version() and queue_info's max_delay.
	OutboxNeeded = 25
	// AlrNeeded is the oldest alr migration the escalation engine works with: 00006 added alr.version().
	AlrNeeded = 6
	// OutboxSecurityFix and AlrSecurityFix are each module's newest migration that fixes a security
	// problem (00030 / 00007: every function searches pg_catalog, then pg_temp; docs/security.md).
	// Clients work with an older schema and warn that it should be upgraded.
	OutboxSecurityFix = 30
	AlrSecurityFix    = 7
)

var securityFix = map[string]int{"outbox": OutboxSecurityFix, "alr": AlrSecurityFix}

// Binary returns the module version the running binary was built from: the tag when it was
// installed with `go install ...@v0.1.0` (or a pseudo-version stamped by the go command), Release
// otherwise (go run, go test, a build without version information).
func Binary() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return Release
}

// Schema is what a database says about one of pgdrain's SQL schemas.
type Schema struct {
	// Module is the schema and migration module: "outbox" or "alr".
	Module string `json:"module"`
	// Installed is false when the database has no such schema.
	Installed bool `json:"installed"`
	// Version is the release the schema belongs to ("" when Migration is 0).
	Version string `json:"version,omitempty"`
	// Migration is the number of the last migration applied, or 0 when the schema is older than
	// the migration that added its version() function (or is not installed).
	Migration int `json:"migration"`
}

// String says it in one phrase: "0.1.0 (migration 00025)", "before migration 00025 (no
// outbox.version())", "not installed".
func (s Schema) String() string {
	switch {
	case !s.Installed:
		return "not installed"
	case s.Migration == 0:
		return fmt.Sprintf("before migration %05d (no %s.version())", firstWithVersion[s.Module], s.Module)
	}
	return fmt.Sprintf("%s (migration %05d)", s.Version, s.Migration)
}

// firstWithVersion is the migration of each module that added its version() function: the 0.1.0
// baseline, which folded the development history (sql/history) and refuses (42P06) a database
// migrated part way through it.
var firstWithVersion = map[string]int{"outbox": 25, "alr": 6}

// BelowBaseline reports whether s was migrated part way through the development history, before
// the 0.1.0 baseline (which refuses it): goose-run up can not bring it forward, the rest of
// sql/history must be applied first (BeforeBaselineSection).
// LacksSecurityFix reports whether s is older than its module's newest security fix.
func (s Schema) LacksSecurityFix() bool {
	return s.Installed && s.Migration < securityFix[s.Module]
}

// SecurityAdvice is what clients say of a schema that lacks the security fix.
func (s Schema) SecurityAdvice() string {
	return fmt.Sprintf("database schema %s is at migration %05d, before the security fix of migration %05d "+
		"(docs/security.md): run goose-run up", s.Module, s.Migration, securityFix[s.Module])
}

func (s Schema) BelowBaseline() bool {
	return s.Installed && s.Migration < firstWithVersion[s.Module]
}

// BeforeBaselineSection is the section of docs/install.md on databases migrated part way through
// the development history.
const BeforeBaselineSection = "docs/install.md#databases-migrated-before-010"

// queries holds the statement of each module; a module is never spliced into SQL.
var queries = map[string]string{
	"outbox": `SELECT version, migration FROM outbox.version()`,
	"alr":    `SELECT version, migration FROM alr.version()`,
}

// Querier is what a pool, a connection and a transaction offer.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Read returns what the database says about module ("outbox" or "alr"). A database without the
// schema, or whose schema predates its version() function, is not an error (see Schema); a
// refused privilege or a lost connection is.
func Read(ctx context.Context, db Querier, module string) (Schema, error) {
	q, ok := queries[module]
	if !ok {
		return Schema{}, fmt.Errorf("unknown module %q", module)
	}
	s := Schema{Module: module, Installed: true}
	err := db.QueryRow(ctx, q).Scan(&s.Version, &s.Migration)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return s, nil
	case errors.As(err, &pgErr) && pgErr.Code == "3F000": // invalid_schema_name
		return Schema{Module: module}, nil
	case errors.As(err, &pgErr) && pgErr.Code == "42883": // undefined_function
		return Schema{Module: module, Installed: true}, nil
	}
	return Schema{}, fmt.Errorf("reading %s.version(): %w", module, err)
}

// ErrSchemaTooOld is matched (errors.Is) by the error Check returns for a schema older than the
// client needs (or not installed).
var ErrSchemaTooOld = errors.New("database schema is older than this program needs")

// TooOldError is a schema older than a client needs: Have is what the database has, Needed the
// oldest migration the client works with.
type TooOldError struct {
	Have   Schema
	Needed int
	// Client names who refuses, as in "this drainer".
	Client string
}

// Error says where the schema is, what the client needs and what to run. A schema below the 0.1.0
// baseline (migrated part way through the development history) can not take goose-run up, whose
// baseline refuses it: the error points to the rest of the history instead.
func (e *TooOldError) Error() string {
	var at string
	m, baseline := e.Have.Module, firstWithVersion[e.Have.Module]
	switch {
	case !e.Have.Installed:
		at = fmt.Sprintf("database has no schema %s", m)
	case e.Have.Migration == 0:
		at = fmt.Sprintf("database schema %s predates migration %05d (it has no %s.version())", m, baseline, m)
	default:
		at = fmt.Sprintf("database schema %s is at migration %05d", m, e.Have.Migration)
	}
	if e.Have.BelowBaseline() {
		return fmt.Sprintf("%s, %s needs %05d or later: the 0.1.0 baseline (migration %05d) refuses a schema "+
			"migrated part way through the history before it; apply the rest of sql/history/%s first, "+
			"then run goose-run up (%s)", at, e.Client, e.Needed, baseline, m, BeforeBaselineSection)
	}
	return fmt.Sprintf("%s, %s needs %05d or later: run goose-run up (cmd/goose-run), "+
		"or apply the migrations/%s/*.sql it lacks in order (docs/install.md)", at, e.Client, e.Needed, m)
}

// Is makes a TooOldError match ErrSchemaTooOld.
func (e *TooOldError) Is(target error) bool { return target == ErrSchemaTooOld }

// Check reads module's version and returns a *TooOldError when it is older than needed, naming
// client ("this drainer") in its message; an error reading it is returned as is.
func Check(ctx context.Context, db Querier, module string, needed int, client string) error {
	_, err := CheckSchema(ctx, db, module, needed, client)
	return err
}

// CheckSchema is Check that also returns the schema it read (for LacksSecurityFix).
func CheckSchema(ctx context.Context, db Querier, module string, needed int, client string) (Schema, error) {
	s, err := Read(ctx, db, module)
	if err != nil {
		return s, err
	}
	if s.Migration < needed {
		return s, &TooOldError{Have: s, Needed: needed, Client: client}
	}
	return s, nil
}
