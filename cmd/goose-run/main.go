// Command goose-run applies pgdrain's embedded migrations.
//
//	goose-run [--dsn URL] [--module NAME] [--lock-timeout D] [--lock-retries N] up | up-to N | down | down-to N | redo | status | version
//
// Without --module, up, status and version act on every module; the commands that name or undo a
// version (up-to, down, down-to, redo) need --module. --dsn falls back to DATABASE_URL.
//
// Migrations run while producers and drainers keep working. A migration that must lock a table
// others hold waits at most --lock-timeout (500ms) for it, then is rolled back and tried again, up
// to --lock-retries times (20), with a growing pause between: PostgreSQL queues every later lock of
// that table behind a waiting migration, so a migration waiting for a long transaction held every
// producer and claim of the queue for as long, and one that locks several queue tables (00042)
// deadlocked with producers writing two of them, which then lost their transaction (40P01). Below
// deadlock_timeout (1s by default), the timeout makes the migration give up first. A lock_timeout
// the URL sets stands unless --lock-timeout is given.
package main

import (
	"context"
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/pgdrain/pgdrain/migrations"
)

const usage = `usage: goose-run [--dsn URL] [--module NAME] [--lock-timeout D] [--lock-retries N] COMMAND
commands: up | up-to VERSION | down | down-to VERSION | redo | status | version`

// Defaults of --lock-timeout and --lock-retries (see the package comment), and the pauses between
// tries.
const (
	defaultLockTimeout = 500 * time.Millisecond
	defaultLockRetries = 20
	retryPauseMin      = 500 * time.Millisecond
	retryPauseMax      = 10 * time.Second
)

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
	lockTimeout := fl.Duration("lock-timeout", defaultLockTimeout,
		"longest wait of a migration for a table lock before it is rolled back and tried again (0: wait as long as it takes)")
	lockRetries := fl.Int("lock-retries", defaultLockRetries, "how many times a migration that timed out on a lock is tried again")
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
	if *lockTimeout < 0 || *lockRetries < 0 {
		return usagef("--lock-timeout and --lock-retries must not be negative, got %s and %d", *lockTimeout, *lockRetries)
	}

	cfg, err := pgx.ParseConfig(*dsn)
	if err != nil {
		return fmt.Errorf("opening database: %s", oneLine(err))
	}
	lockTimeoutSet := false
	fl.Visit(func(f *flag.Flag) { lockTimeoutSet = lockTimeoutSet || f.Name == "lock-timeout" })
	_, inURL := cfg.RuntimeParams["lock_timeout"]
	switch {
	case !lockTimeoutSet && (inURL || strings.Contains(cfg.RuntimeParams["options"], "lock_timeout")):
		// The URL's own lock_timeout stands unless --lock-timeout is given.
		*lockTimeout = 0
	case *lockTimeout > 0:
		// Milliseconds, as a startup parameter of every connection goose opens.
		cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(lockTimeout.Milliseconds(), 1), 10)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		return fmt.Errorf("connecting to database: %s", oneLine(err))
	}
	// The migration must give up before a producer's deadlock check runs, or the producer may be
	// the one that fails (see the package comment).
	var deadlockMS int64
	if *lockTimeout > 0 && db.QueryRowContext(pingCtx,
		`SELECT (pg_catalog.date_part('epoch', pg_catalog.current_setting('deadlock_timeout')::interval) * 1000)::bigint`).Scan(&deadlockMS) == nil &&
		lockTimeout.Milliseconds() >= deadlockMS {
		fmt.Fprintf(out, "goose-run: warning: --lock-timeout %s is not below the server's deadlock_timeout (%dms): a producer "+
			"caught in a deadlock with a migration may be the one that fails; pass a shorter --lock-timeout\n", *lockTimeout, deadlockMS)
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
		if err := applyRetrying(ctx, p, m, cmd, target, *lockTimeout, *lockRetries, out); err != nil {
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

// applyRetrying runs apply, and again while a migration was rolled back for waiting longer than
// lockTimeout for a lock (55P03), or was chosen as a deadlock's victim (40P01): the migrations
// before it stay applied, and the next try starts with it. Between tries it pauses, longer each
// time, so that the transactions it waited for can end.
func applyRetrying(ctx context.Context, p *goose.Provider, m migrations.Module, cmd string, target int64,
	lockTimeout time.Duration, retries int, out io.Writer) error {
	if cmd == "redo" {
		// Each half tried again on its own: tried as a whole, a redo whose up timed out undid the
		// migration before it on its next try.
		if err := applyRetrying(ctx, p, m, "down", target, lockTimeout, retries, out); err != nil {
			return err
		}
		return applyRetrying(ctx, p, m, "up-by-one", target, lockTimeout, retries, out)
	}
	pause := retryPauseMin
	for try := 0; ; try++ {
		err := apply(ctx, p, m, cmd, target, out)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || (pgErr.Code != "55P03" && pgErr.Code != "40P01") {
			return err
		}
		if try >= retries {
			return fmt.Errorf("%w (tried %d times; other transactions held the tables it locks: run it again when no long "+
				"transaction, lock-mode batch or producer writing several queues at once is open, or with a longer --lock-timeout)",
				err, try+1)
		}
		why := "waited longer than its lock_timeout for a lock"
		if lockTimeout > 0 {
			why = fmt.Sprintf("waited %s for a lock", lockTimeout)
		}
		if pgErr.Code == "40P01" {
			why = "was a deadlock's victim"
		}
		fmt.Fprintf(out, "%s: a migration %s and was rolled back (producers and drainers went on); trying again in %s (%d of %d)\n",
			m.Name, why, pause, try+1, retries)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, retryPauseMax)
	}
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
	case "up-by-one": // redo's second half (applyRetrying)
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
