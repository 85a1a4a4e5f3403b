// Command goose-run applies pgdrain's embedded migrations.
//
//	goose-run [--dsn URL] [--module NAME] up | up-to N | down | down-to N | redo | status | version
//
// Without --module, up, status and version act on every module; the commands that name or undo a
// version (up-to, down, down-to, redo) need --module. --dsn falls back to DATABASE_URL.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/pgdrain/pgdrain/migrations"
)

const usage = `usage: goose-run [--dsn URL] [--module NAME] COMMAND
commands: up | up-to VERSION | down | down-to VERSION | redo | status | version`

// Exit codes, as pgdrain's: 0 ok, 1 the migration or the database failed, 2 usage error.
const (
	exitFailed = 1
	exitUsage  = 2
)

// usageError is a mistake in the command line (exit 2), found before any database is touched.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func main() {
	// Interrupted deploys stop between statements; goose rolls back the migration in flight.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Println(usage)
	case err != nil:
		fmt.Fprintln(os.Stderr, "goose-run:", err)
		if errors.As(err, new(usageError)) {
			os.Exit(exitUsage)
		}
		os.Exit(exitFailed)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fl := flag.NewFlagSet("goose-run", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	dsn := fl.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	module := fl.String("module", "", "module to act on (default: all for up/status/version)")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v\n%s", err, usage)
	}
	rest := fl.Args()
	if len(rest) == 0 {
		return usagef("%s", usage)
	}
	cmd, cmdArgs := rest[0], rest[1:]
	mods, err := selectModules(cmd, *module)
	if err != nil {
		return err
	}
	target, err := versionArg(cmd, cmdArgs)
	if err != nil {
		return err
	}
	if *dsn == "" {
		return usagef("no database: pass --dsn or set DATABASE_URL")
	}

	db, err := sql.Open("pgx", *dsn)
	if err != nil {
		return fmt.Errorf("opening database: %w", err)
	}
	defer db.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		return fmt.Errorf("connecting to database: %s", oneLine(err))
	}

	if cmd == "down" || cmd == "down-to" {
		slices.Reverse(mods)
	}
	// Concurrent deployers (replicas starting at once) take turns on a PostgreSQL advisory lock.
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return err
	}
	for _, m := range mods {
		p, err := migrations.NewProvider(db, m, goose.WithSessionLocker(locker))
		if err != nil {
			return err
		}
		if err := apply(ctx, p, m, cmd, target, out); err != nil {
			return fmt.Errorf("module %s: %s", m.Name, oneLine(err))
		}
	}
	return nil
}

func selectModules(cmd, module string) ([]migrations.Module, error) {
	switch cmd {
	case "up", "status", "version", "up-to", "down", "down-to", "redo":
	default:
		return nil, usagef("unknown command %q\n%s", cmd, usage)
	}
	if module != "" {
		m, err := migrations.ModuleByName(module)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		return []migrations.Module{m}, nil
	}
	if len(migrations.Modules) > 1 && cmd != "up" && cmd != "status" && cmd != "version" {
		return nil, usagef("%s needs --module (one of the modules)", cmd)
	}
	return slices.Clone(migrations.Modules), nil
}

func versionArg(cmd string, args []string) (int64, error) {
	wants := cmd == "up-to" || cmd == "down-to"
	if !wants {
		if len(args) > 0 {
			return 0, usagef("%s takes no arguments, got %q", cmd, strings.Join(args, " "))
		}
		return 0, nil
	}
	if len(args) != 1 {
		return 0, usagef("%s needs exactly one VERSION", cmd)
	}
	v, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || v < 0 {
		return 0, usagef("%s: VERSION must be a non-negative integer, got %q", cmd, args[0])
	}
	return v, nil
}

func apply(ctx context.Context, p *goose.Provider, m migrations.Module, cmd string, target int64, out io.Writer) error {
	report := func(results []*goose.MigrationResult, err error) error {
		for _, r := range results {
			fmt.Fprintf(out, "%s: %s %s (%s)\n", m.Name, r.Direction, r.Source.Path, r.Duration.Round(time.Millisecond))
		}
		if err != nil {
			var perr *goose.PartialError
			if errors.As(err, &perr) && perr.Failed != nil {
				return fmt.Errorf("migration %s failed: %w", perr.Failed.Source.Path, perr.Err)
			}
			return err
		}
		if len(results) == 0 && (cmd == "up" || cmd == "up-to") {
			fmt.Fprintf(out, "%s: no migrations to apply\n", m.Name)
		}
		return nil
	}
	switch cmd {
	case "up":
		return report(p.Up(ctx))
	case "up-to":
		return report(p.UpTo(ctx, target))
	case "down":
		r, err := p.Down(ctx)
		return report(single(r), err)
	case "down-to":
		return report(p.DownTo(ctx, target))
	case "redo":
		down, err := p.Down(ctx)
		if err := report(single(down), err); err != nil {
			return err
		}
		up, err := p.UpByOne(ctx)
		return report(single(up), err)
	case "version":
		v, err := p.GetDBVersion(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: version %d\n", m.Name, v)
		return nil
	case "status":
		statuses, err := p.Status(ctx)
		if err != nil {
			return err
		}
		for _, s := range statuses {
			applied := "pending"
			if s.State == goose.StateApplied {
				applied = "applied " + s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(out, "%s: %-40s %s\n", m.Name, s.Source.Path, applied)
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", cmd)
}

func single(r *goose.MigrationResult) []*goose.MigrationResult {
	if r == nil {
		return nil
	}
	return []*goose.MigrationResult{r}
}

// oneLine folds a multi-line driver error into one line for the terminal.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
