package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/internal/console"
)

// webCommand serves the operator console (internal/console) until ctx ends. Pages read through
// --dsn, actions go through --operator-dsn (default: --dsn); --read-only opens no operator pool.
var webCommand = command{
	name: "web", minArgs: 0, maxArgs: 0, ownsConnections: true,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		listen := fs.String("listen", "127.0.0.1:8080", "address to serve on (host:port; port 0 picks one)")
		readOnly := fs.Bool("read-only", false, "serve the pages without any action (POST refused with 403)")
		operatorDSN := fs.String("operator-dsn", os.Getenv("PGDRAIN_WEB_OPERATOR_DSN"), "PostgreSQL URL for actions (default: --dsn)")
		token := fs.String("token", os.Getenv("PGDRAIN_WEB_TOKEN"), "require this token (default $PGDRAIN_WEB_TOKEN)")
		basic := fs.String("basic-auth", os.Getenv("PGDRAIN_WEB_BASIC_AUTH"), "require HTTP basic auth USER:PASSWORD (default $PGDRAIN_WEB_BASIC_AUTH)")
		refresh := ageFlag{console.DefaultRefresh}
		fs.Var(&refresh, "refresh", "how often to sample outbox.stats and refresh the pages")
		wedgedAfter := ageFlag{console.DefaultWedgedAfter}
		fs.Var(&wedgedAfter, "wedged-after", "list partitions whose oldest pending row is older than this")
		sessionTTL := ageFlag{console.DefaultSessionTTL}
		fs.Var(&sessionTTL, "session-ttl", "how long the cookie a ?token= visit sets stays valid")
		var user, password string
		validate := func() error {
			// An empty --token (given, or $PGDRAIN_WEB_TOKEN set to white space) must not quietly
			// mean "no authentication", nor a token nobody can send in a header.
			tokenGiven := false
			fs.Visit(func(f *flag.Flag) { tokenGiven = tokenGiven || f.Name == "token" })
			if (tokenGiven || *token != "") && (strings.TrimSpace(*token) == "" || strings.TrimSpace(*token) != *token) {
				return usagef("web: --token (or $PGDRAIN_WEB_TOKEN) must not be empty, blank, or begin or end with white space")
			}
			if sessionTTL.d < console.MinSessionTTL {
				return usagef("web: --session-ttl must be at least %s, got %s", ageText(console.MinSessionTTL), ageText(sessionTTL.d))
			}
			if *basic != "" {
				var ok bool
				user, password, ok = strings.Cut(*basic, ":")
				if !ok || user == "" || password == "" {
					return usagef("web: --basic-auth must be USER:PASSWORD, both non-empty")
				}
			}
			if wedgedAfter.d <= 0 {
				// The console's zero means its default (1m): 0s would have listed nothing younger
				// than a minute while saying "older than 1m".
				return usagef("web: --wedged-after must be more than 0s (1s lists every partition whose oldest pending row is a second old), got %s", ageText(wedgedAfter.d))
			}
			if refresh.d < console.MinRefresh || refresh.d > maxRefresh {
				return usagef("web: --refresh must be between %s and %s, got %s", ageText(console.MinRefresh), ageText(maxRefresh), ageText(refresh.d))
			}
			if err := console.CheckListen(*listen, *token != "" || *basic != ""); err != nil {
				return usagef("web: %v", err)
			}
			return nil
		}
		return validate, func(ctx context.Context, e env, _ []string) error {
			// The throughput figures keep at least two samples: a --refresh above half of the console's
			// default history (7m30s) was refused, after connecting, as "History must be at least two
			// Refresh intervals", an option pgdrain web does not have.
			cfg := console.Config{ReadOnly: *readOnly, Token: *token, BasicUser: user, BasicPassword: password,
				Refresh: refresh.d, WedgedAfter: wedgedAfter.d, SessionTTL: sessionTTL.d,
				History: max(console.DefaultHistory, 2*refresh.d)}
			return web(ctx, e, *listen, cmp.Or(*operatorDSN, e.dsn), cfg)
		}
	},
}

// maxRefresh bounds --refresh: the pages reload and the sampler reads every --refresh, and a
// figure is called stale after two of them.
const maxRefresh = 24 * time.Hour

func web(ctx context.Context, e env, listen, operatorDSN string, cfg console.Config) error {
	var handler slog.Handler = slog.NewTextHandler(e.errOut, nil)
	if e.json {
		handler = slog.NewJSONHandler(e.errOut, nil)
	}
	cfg.Logger = slog.New(handler)
	reader, err := openPool(ctx, e.dsn, "--dsn", 4)
	if err != nil {
		return err
	}
	defer reader.Close()
	cfg.Reader = reader
	if !cfg.ReadOnly {
		operator, err := openPool(ctx, operatorDSN, "--operator-dsn", 2)
		if err != nil {
			return err
		}
		defer operator.Close()
		cfg.Operator = operator
	}
	srv, err := console.New(cfg)
	if err != nil {
		return usagef("web: %v", err)
	}
	if err := srv.CheckSchema(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	mode := "actions through the operator connection"
	if cfg.ReadOnly {
		mode = "read-only"
	}
	fmt.Fprintf(e.out, "pgdrain web: serving http://%s/ (%s)\n", ln.Addr(), mode)
	cfg.Logger.Info("console started", "addr", ln.Addr().String(), "read_only", cfg.ReadOnly,
		"auth", cfg.Token != "" || cfg.BasicUser != "", "refresh", ageText(cfg.Refresh))
	return srv.Run(ctx, ln)
}

// openPool connects a small pool (the console's pages and actions need few connections) and pings
// it, so that a wrong DSN or role fails at start rather than on the first page.
func openPool(ctx context.Context, dsn, flagName string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, usagef("%s (or DATABASE_URL, or the PG* environment) is not a valid PostgreSQL connection string: %v", flagName, err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = "pgdrain-web"
	textTimesInUTC(cfg.ConnConfig.RuntimeParams)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to database (%s): %w", flagName, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to database (%s): %w", flagName, err)
	}
	return pool, nil
}
