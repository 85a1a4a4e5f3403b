// Package migrations embeds pgdrain's goose migrations. Each module (a folder) is an independent
// migration sequence with its own goose version table, so a service can apply only what it uses.
package migrations

import (
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

//go:embed outbox/*.sql alr/*.sql
var FS embed.FS

// Module is one migration sequence: a folder of FS and the table goose records its version in.
type Module struct {
	// Name is the folder under FS and the name the CLI accepts.
	Name string
	// VersionTable is the goose version table of this module.
	VersionTable string
}

// Modules lists every module in the order `up` applies them (and `down` reverses).
var Modules = []Module{
	{Name: "outbox", VersionTable: "pgdrain_outbox_goose_version"},
	{Name: "alr", VersionTable: "pgdrain_alr_goose_version"},
}

// ModuleByName returns the module called name.
func ModuleByName(name string) (Module, error) {
	for _, m := range Modules {
		if m.Name == name {
			return m, nil
		}
	}
	names := make([]string, len(Modules))
	for i, m := range Modules {
		names[i] = m.Name
	}
	return Module{}, fmt.Errorf("unknown module %q (known: %v)", name, names)
}

// NewProvider returns a goose provider for module m over db.
func NewProvider(db *sql.DB, m Module, opts ...goose.ProviderOption) (*goose.Provider, error) {
	sub, err := fs.Sub(FS, m.Name)
	if err != nil {
		return nil, fmt.Errorf("opening module %s: %w", m.Name, err)
	}
	opts = append([]goose.ProviderOption{goose.WithTableName(m.VersionTable)}, opts...)
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading module %s: %w", m.Name, err)
	}
	return p, nil
}
