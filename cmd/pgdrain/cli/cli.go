package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgdrain/pgdrain/internal/pgerr"
	"github.com/pgdrain/pgdrain/internal/sqlrule"
)

// Exit codes of Run. Scripts can rely on them.
const (
	// ExitOK means the command did what it was asked and found nothing wrong.
	ExitOK = 0
	// ExitProblems means the command ran but found problems: check found one, wedged found a
	// wedged partition, poisoned listed a poisoned row, or skip, retry or dismiss left a row alone
	// that had moved on since the operator looked (or that a worker was delivering).
	ExitProblems = 1
	// ExitUsage means the arguments were wrong; nothing was sent to the database.
	ExitUsage = 2
	// ExitDatabase means the database refused or could not be reached.
	ExitDatabase = 3
)

// Usage is the help text printed for usage errors and for `pgdrain help`.
const Usage = `usage: pgdrain [--dsn URL] [--json] COMMAND [ARGS]

commands:
  queues                          list the registered queues (outbox.queues)
  stats QUEUE                     pending, ready, leased, backing off, poisoned, oldest pending
  wedged QUEUE [--older-than 1m] [--limit 10]
                                  partitions whose oldest pending row is older than --older-than,
                                  with the reason their head does not move (exit 1 if any)
  poisoned QUEUE [--key K] [--limit 50]
                                  the poisoned rows, newest first: id, key, type, attempts,
                                  created, event id, last error (exit 1 if any)
  requeue QUEUE (ID... | --key K | --all)
                                  give poisoned rows (the given ids, those of key K, or all with
                                  --all) a fresh start, each at the tail of its key
  skip QUEUE ID --attempts N --reason TEXT
                                  poison a row that will never succeed (a wedged head): its key
                                  moves on; requeue delivers it later (exit 1 if the row moved on)
  retry QUEUE ID --attempts N [--reason TEXT]
                                  end a backing-off row's backoff: the next claim takes it (exit 1
                                  if the row moved on); --attempts as wedged or poisoned show it
  dismiss QUEUE ID... --reason TEXT
                                  dismiss poisoned rows for good: kept as history, never delivered,
                                  no longer counted as poisoned (exit 1 if some were not taken)
  actions QUEUE [--limit 50]      the operators' skips, retries and dismissals, newest first
  purge QUEUE [--older-than 7d] [--max-rows N] [--chunk 5000] [--dry-run]
                                  delete rows sent more than --older-than ago, --chunk rows per
                                  short transaction, at most --max-rows in all (0 = no limit);
                                  --dry-run counts them and deletes nothing
  check QUEUE                     index set, autovacuum settings, NOTIFY and heads triggers,
                                  CHECK constraints pending rows break, an id sequence behind the
                                  ids, and pending rows no claim can reach (outbox.repair dry run;
                                  changes nothing) (exit 1 if any problem)
  web [--listen 127.0.0.1:8080] [--read-only] [--operator-dsn URL] [--token T | --basic-auth U:P]
      [--refresh 5s] [--wedged-after 1m] [--session-ttl 12h]
                                  the operator console in the browser (docs/console.md); runs
                                  until interrupted
  relay --config FILE [--check]   relay queues to webhooks, Kafka or NATS JetStream as FILE says
                                  (docs/relay.md) until SIGTERM; --check only validates FILE
  escalate --config FILE [--check]
                                  run the escalation engine: deliver due ladder steps to the
                                  webhooks FILE names (docs/escalate.md) until SIGTERM; --check
                                  only validates FILE
  fanout add QUEUE SINK [--from now|oldest]
                                  create the queue QUEUE__SINK that feeds sink SINK of a queue
                                  the relay fans out; with --from oldest, copy the retained sent
                                  events into it first (as the queue's owner; docs/relay.md)

flags (before or after the command):
  --dsn URL    PostgreSQL URL (default $DATABASE_URL; without either, the PG* environment
               and libpq's defaults, as psql)
  --json       machine-readable output; errors too, as {"error", "code", "exit_code",
               "sqlstate"} on stderr
  --version    print pgdrain's version and, when the database is reachable, the version of its
               outbox and alr schemas (outbox.version(), alr.version())

exit codes: 0 ok, 1 problems found, 2 usage error (an unknown queue too), 3 database error
(relay, escalate: 2 for a bad config file, 3 when it stops on an error)`

const noCommand = "no command given"

// usageError is a problem with the arguments, reported with exit code 2.
type usageError struct{ msg string }

// fileError is a usage error about what a file says (every problem on its own line, each naming
// the file, line and field): it exits like one, but does not point at the usage text, which
// would not help.
type fileError struct{ msg string }

func (e fileError) Error() string { return e.msg }

// relayFailure is the relay stopping on an error once it ran (a queue that is not registered, a
// sink that can not start): ExitDatabase, in the relay's words (which queue, what went wrong)
// rather than those of the SQL function that refused.
type relayFailure struct{ err error }

func (e relayFailure) Error() string { return e.err.Error() }
func (e relayFailure) Unwrap() error { return e.err }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// problemsFound makes Run exit with ExitProblems after the command printed its findings.
var problemsFound = errors.New("problems found")

// env is what every command gets: the connection and where to write. A command that opens its
// own connections (ownsConnections) gets conn nil and the DSN instead.
type env struct {
	conn   *pgx.Conn // nil for a command that connects itself (relay)
	dsn    string    // --dsn or $DATABASE_URL ("" = the PG* environment)
	out    io.Writer
	errOut io.Writer
	json   bool
}

// action is the body of a subcommand, run once the arguments are known to be good.
type action func(ctx context.Context, e env, args []string) error

// command is one subcommand: how many positional arguments it takes, and bind, which registers its
// flags on a fresh FlagSet and returns a check of their values (run before connecting) and the
// body. Flag values live in bind's closure, so concurrent Runs share nothing.
type command struct {
	name    string
	minArgs int
	maxArgs int // -1: any number
	bind    func(fs *flag.FlagSet) (validate func() error, run action)
	// ownsConnections: run connects by itself (web opens pools), so Run does not connect first.
	ownsConnections bool
}

// noFlags is bind for a subcommand without flags of its own.
func noFlags(run action) func(*flag.FlagSet) (func() error, action) {
	return func(*flag.FlagSet) (func() error, action) { return func() error { return nil }, run }
}

var commands = []command{queuesCommand, statsCommand, wedgedCommand, poisonedCommand, requeueCommand, skipCommand,
	retryCommand, dismissCommand, actionsCommand, purgeCommand, checkCommand, webCommand, relayCommand, escalateCommand,
	fanoutCommand}

// Run runs the pgdrain command with args (without the program name), writing results to stdout
// and errors to stderr, and returns the process exit code (ExitOK, ExitProblems, ExitUsage or
// ExitDatabase). With --json anywhere in args an error is one JSON object on stderr (see
// errorReport), with the same exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout, stderr)
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, problemsFound) {
		return ExitProblems
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, Usage)
		return ExitOK
	}
	rep := report(err)
	if wantsJSON(args) {
		_ = json.NewEncoder(stderr).Encode(rep)
		return rep.ExitCode
	}
	switch {
	case rep.Code != codeUsage, isFileError(err):
		fmt.Fprintf(stderr, "pgdrain: %s\n", terminalSafeLines(rep.Error))
	case rep.Error == noCommand:
		fmt.Fprintf(stderr, "pgdrain: %s\n\n%s\n", terminalSafeLines(rep.Error), Usage)
	default:
		fmt.Fprintf(stderr, "pgdrain: %s (pgdrain help: usage)\n", terminalSafeLines(rep.Error))
	}
	return rep.ExitCode
}

// Error codes of an errorReport: which class of error, as the exit code says.
const (
	codeUsage        = "usage"         // ExitUsage: wrong arguments, nothing sent to the database
	codeUnknownQueue = "unknown_queue" // ExitUsage: the queue is not registered (SQLSTATE 42P01)
	codeDatabase     = "database"      // ExitDatabase: the database refused or could not be reached
)

// errorReport is an error as --json prints it on stderr:
// {"error": "...", "code": "usage", "exit_code": 2, "sqlstate": "42P01"} (sqlstate only when
// PostgreSQL raised the error).
type errorReport struct {
	Error    string `json:"error"`
	Code     string `json:"code"`
	ExitCode int    `json:"exit_code"`
	SQLState string `json:"sqlstate,omitempty"`
}

func isFileError(err error) bool {
	var fe fileError
	return errors.As(err, &fe)
}

func report(err error) errorReport {
	var ue usageError
	if errors.As(err, &ue) {
		return errorReport{Error: ue.msg, Code: codeUsage, ExitCode: ExitUsage}
	}
	var fe fileError
	if errors.As(err, &fe) {
		return errorReport{Error: fe.msg, Code: codeUsage, ExitCode: ExitUsage}
	}
	var rf relayFailure
	if errors.As(err, &rf) {
		rep := errorReport{Error: rf.Error(), Code: codeDatabase, ExitCode: ExitDatabase}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			rep.SQLState = pgErr.Code
		}
		return rep
	}
	rep := errorReport{Error: describe(err), Code: codeDatabase, ExitCode: ExitDatabase}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		rep.SQLState = pgErr.Code
	}
	if isUnknownQueue(err) {
		rep.Code, rep.ExitCode = codeUnknownQueue, ExitUsage
	}
	return rep
}

// wantsJSON reports whether args ask for --json, read before parsing so that an error in parsing
// (an unknown flag after --json, or before it) is reported as JSON too. The last --json wins, as
// in the flag package; arguments after "--" are positional.
func wantsJSON(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		on = true
		if hasValue {
			on, _ = strconv.ParseBool(value)
		}
	}
	return on
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	dsn := os.Getenv("DATABASE_URL")
	asJSON := false
	common := func(fs *flag.FlagSet) {
		fs.StringVar(&dsn, "dsn", dsn, "PostgreSQL URL (default $DATABASE_URL)")
		fs.BoolVar(&asJSON, "json", asJSON, "machine-readable output")
	}

	global := flag.NewFlagSet("pgdrain", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	common(global)
	showVersion := global.Bool("version", false, "print pgdrain's version")
	if err := global.Parse(args); err != nil {
		return flagError(err)
	}
	if *showVersion {
		return printVersion(ctx, dsn, asJSON, stdout)
	}
	if global.NArg() == 0 {
		return usagef(noCommand)
	}
	name := global.Arg(0)
	if name == "help" {
		return flag.ErrHelp
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == name {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		return usagef("unknown command %q", name)
	}

	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	common(fs)
	validate, act := cmd.bind(fs)
	positional, err := parseInterleaved(fs, global.Args()[1:])
	if err != nil {
		return flagError(err)
	}
	if len(positional) < cmd.minArgs || (cmd.maxArgs >= 0 && len(positional) > cmd.maxArgs) {
		return usagef("%s: wrong number of arguments (%d)", name, len(positional))
	}
	// A QUEUE that can be no queue's name is a usage error before connecting: refused by the SQL
	// functions (22023) it exited 3, as an outage does (`pgdrain stats "$QUEUE"`, the variable unset).
	if i, ok := queueArgument[name]; ok && i < len(positional) && !sqlrule.QueueName.MatchString(positional[i]) {
		return usagef("%s: QUEUE must be a plain name \"schema.table\" (letters, digits, _), as outbox.create_queue registers it, got %q",
			name, positional[i])
	}
	if err := validate(); err != nil {
		return err
	}
	if cmd.ownsConnections {
		return act(ctx, env{dsn: dsn, out: stdout, errOut: stderr, json: asJSON}, positional)
	}
	// No --dsn and no DATABASE_URL: libpq's PG* variables and defaults, as psql does.
	conn, err := connect(ctx, dsn, stderr)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	err = act(ctx, env{conn: conn, dsn: dsn, out: stdout, errOut: stderr, json: asJSON}, positional)
	if pgerr.ReadOnly(err) {
		// The refused statement's transaction has ended: its session can say why it is read only.
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readOnlyQuestionTimeout)
		defer cancel()
		err = refusedWrite{err: err, cause: pgerr.WhyReadOnly(qctx, conn)}
	}
	return err
}

// queueArgument is where a command's QUEUE is among its arguments (fanout: after "add").
var queueArgument = map[string]int{"stats": 0, "wedged": 0, "poisoned": 0, "requeue": 0, "skip": 0, "retry": 0,
	"dismiss": 0, "actions": 0, "purge": 0, "check": 0, "fanout": 1}

// readOnlyQuestionTimeout bounds asking the server why it refused a write.
const readOnlyQuestionTimeout = 5 * time.Second

// refusedWrite is a write the server refused because the transaction was read only (SQLSTATE
// 25006), with what the server says of itself (pgerr.WhyReadOnly): a standby, or a primary whose
// default_transaction_read_only is on, and where it was set. PostgreSQL's words alone ("cannot
// execute UPDATE in a read-only transaction") tell the operator neither which command's step
// failed nor what to fix.
type refusedWrite struct {
	err   error
	cause string
}

func (e refusedWrite) Error() string { return e.err.Error() + ": " + e.cause }
func (e refusedWrite) Unwrap() error { return e.err }

// parseInterleaved parses flags that may come before, between or after the positional arguments
// (`pgdrain wedged QUEUE --older-than 5m`); the standard flag package stops at the first one.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err.Error()}
}

func connect(ctx context.Context, dsn string, stderr io.Writer) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, usagef("--dsn (or DATABASE_URL, or the PG* environment) is not a valid PostgreSQL connection string: %v", err)
	}
	cfg.RuntimeParams["application_name"] = "pgdrain-cli"
	textTimesInUTC(cfg.RuntimeParams)
	unpinned := cfg.Copy()
	pinSearchPath(cfg.RuntimeParams)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil && refusedStartupParameter(err) {
		// A pooler that does not pass search_path on (PgBouncer: "unsupported startup parameter")
		// gets the connection without it: the commands work as before, unprotected.
		fmt.Fprintln(stderr, "pgdrain: the server (a pooler) refused the search_path startup parameter; connecting without pinning it")
		conn, err = pgx.ConnectConfig(cctx, unpinned)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to database: %w", err)
	}
	return conn, nil
}

// refusedStartupParameter: PgBouncer answers a startup parameter it does not track with
// "unsupported startup parameter: <name>" (08P01).
func refusedStartupParameter(err error) bool {
	return strings.Contains(err.Error(), "unsupported startup parameter")
}

// textTimesInUTC asks the server to write times into texts (reasons, details) as ISO in UTC
// unless the connection string says otherwise; timetext.Rewrite then gives them the one format
// pgdrain prints (RFC 3339, UTC) whatever the server's defaults.
func textTimesInUTC(params map[string]string) {
next:
	for k, v := range map[string]string{"DateStyle": "ISO, YMD", "TimeZone": "UTC"} {
		for given := range params {
			if strings.EqualFold(given, k) {
				continue next
			}
		}
		params[k] = v
	}
}

// searchPath is the search_path of the commands' connections (not web, relay or escalate, which
// are documented to run behind PgBouncer, and whose SQL is calls of schema-qualified functions),
// whatever the login role's or the connection string's. Every name in pgdrain's SQL is
// schema-qualified, but operators and functions in it are not (`q.queue = lower($1)`): with the
// role's search_path, a schema ahead of pg_catalog (ALTER ROLE ... SET search_path = evil,
// pg_catalog) could slip its own `=(text, text)` into them, run as whoever runs pgdrain. pg_temp
// last: a temporary object never shadows a catalog one.
const searchPath = "pg_catalog, pg_temp"

// pinSearchPath sets search_path in the startup parameters, replacing one the connection string
// gave, so that it holds from the connection's first statement.
func pinSearchPath(params map[string]string) {
	for k := range params {
		if strings.EqualFold(k, "search_path") {
			delete(params, k)
		}
	}
	params["search_path"] = searchPath
}

// isUnknownQueue: the outbox functions name a queue that is not registered (or whose table is gone)
// with SQLSTATE 42P01, which is the caller's mistake, not the database's.
func isUnknownQueue(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// describe turns a database error into one line that keeps PostgreSQL's message and SQLSTATE. A
// refused write also keeps what the command was doing and says why the server refuses it.
func describe(err error) string {
	var pgErr *pgconn.PgError
	var refused refusedWrite
	if errors.As(err, &refused) && errors.As(err, &pgErr) {
		doing, ok := strings.CutSuffix(refused.err.Error(), pgErr.Error())
		if !ok {
			return strings.Join(strings.Fields(refused.Error()), " ")
		}
		return fmt.Sprintf("%s%s (SQLSTATE %s): %s", doing, pgErr.Message, pgErr.Code, refused.cause)
	}
	if errors.As(err, &pgErr) {
		return fmt.Sprintf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
