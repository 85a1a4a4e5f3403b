package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/pgdrain/pgdrain/internal/version"
)

// versionTimeout bounds the connection of pgdrain --version: a database that does not answer is
// reported, not waited for.
const versionTimeout = 5 * time.Second

// versionReport is what pgdrain --version prints (--json: this object on stdout).
type versionReport struct {
	// Version is the binary's (internal/version.Binary).
	Version  string          `json:"version"`
	Database databaseVersion `json:"database"`
}

// databaseVersion is the database's side: its schemas when it was reached, why not otherwise.
type databaseVersion struct {
	Connected bool `json:"connected"`
	// Error says why the database was not reached (Connected false).
	Error  string         `json:"error,omitempty"`
	Outbox *schemaVersion `json:"outbox,omitempty"`
	Alr    *schemaVersion `json:"alr,omitempty"`
}

// schemaVersion is one schema's version, what this pgdrain needs of it, and why it could not be
// read (a role without the schema's privileges).
type schemaVersion struct {
	version.Schema
	Needed int `json:"needed"`
	// SecurityFix is the module's newest migration that fixes a security problem: a schema
	// older works, and should be upgraded.
	SecurityFix int    `json:"security_fix"`
	Error       string `json:"error,omitempty"`
}

func (s *schemaVersion) String() string {
	if s.Error != "" {
		return "unknown (" + s.Error + ")"
	}
	text := s.Schema.String()
	switch {
	case s.BelowBaseline():
		text += fmt.Sprintf(", older than this pgdrain needs (%05d): apply the rest of sql/history/%s first, "+
			"then run goose-run up (%s)", s.Needed, s.Module, version.BeforeBaselineSection)
	case s.Installed && s.Migration < s.Needed:
		text += fmt.Sprintf(", older than this pgdrain needs (%05d): run goose-run up", s.Needed)
	case s.LacksSecurityFix():
		text += fmt.Sprintf(", before the security fix of migration %05d (docs/security.md): run goose-run up", s.SecurityFix)
	}
	return text
}

// printVersion prints the binary's version and, when the database answers (--dsn, DATABASE_URL or
// the PG* environment, as every command), its outbox and alr versions. An unreachable database is
// reported and is not an error: the binary's version is still worth printing.
func printVersion(ctx context.Context, dsn string, asJSON bool, out io.Writer) error {
	rep := versionReport{Version: version.Binary()}
	cctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	conn, err := connect(cctx, dsn, io.Discard)
	if err != nil {
		rep.Database.Error = describe(err)
	} else {
		defer conn.Close(context.Background())
		rep.Database.Connected = true
		read := func(module string, needed, securityFix int) *schemaVersion {
			s, err := version.Read(cctx, conn, module)
			v := &schemaVersion{Schema: s, Needed: needed, SecurityFix: securityFix}
			v.Module = module
			if err != nil {
				v.Error = describe(err)
			}
			return v
		}
		rep.Database.Outbox = read("outbox", version.OutboxNeeded, version.OutboxSecurityFix)
		rep.Database.Alr = read("alr", version.AlrNeeded, version.AlrSecurityFix)
	}
	if asJSON {
		return writeJSON(out, rep)
	}
	fmt.Fprintln(out, "pgdrain", rep.Version)
	if !rep.Database.Connected {
		fmt.Fprintf(out, "database: not connected (%s)\n", rep.Database.Error)
		return nil
	}
	fmt.Fprintln(out, "database outbox:", rep.Database.Outbox)
	fmt.Fprintln(out, "database alr:", rep.Database.Alr)
	return nil
}
