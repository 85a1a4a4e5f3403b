package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/escalation/config"
)

// escalateCommand runs the escalation engine (package escalation) with the notifiers its config
// file names, until SIGTERM or SIGINT.
var escalateCommand = command{
	name: "escalate", minArgs: 0, maxArgs: 0, ownsConnections: true,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		path := fs.String("config", "", "the escalation engine's YAML config file")
		check := fs.Bool("check", false, "validate the config file and exit")
		var file *config.File
		validate := func() error {
			if *path == "" {
				return usagef("escalate: --config FILE is required")
			}
			f, err := config.Load(*path)
			if err != nil {
				// Every problem on its own line, each naming the file, line and field.
				return usageError{"escalate: invalid config:\n" + err.Error()}
			}
			file = f
			return nil
		}
		return validate, func(ctx context.Context, e env, _ []string) error {
			if *check {
				fmt.Fprintf(e.out, "%s: ok, %d channel(s): %s\n", *path, len(file.Channels), strings.Join(file.ChannelNames(), ", "))
				return nil
			}
			return runEscalate(ctx, e, file)
		}
	},
}

// engineApplicationName is what the engine's connections call themselves: escalation.ApplicationName
// (which the console looks for in pg_stat_activity), then the host and the process, so that the
// console tells engines apart. At most 63 bytes (NAMEDATALEN - 1).
func engineApplicationName() string {
	host, _ := os.Hostname()
	name := fmt.Sprintf("%s %s:%d", escalation.ApplicationName, host, os.Getpid())
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// runEscalate runs the engine until ctx ends, then stops it gracefully: the step in hand is
// finished, the rest of its batch given back (alr.release_step), and the endpoint closes last.
func runEscalate(ctx context.Context, e env, file *config.File) error {
	logger := file.Logger(e.errOut)
	pcfg, err := pgxpool.ParseConfig(cmp.Or(file.DSN, e.dsn))
	if err != nil {
		return usagef("escalate: dsn (in the config, or --dsn, DATABASE_URL, the PG* environment) is not a valid PostgreSQL connection string: %v", err)
	}
	if name, ok := pcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		pcfg.ConnConfig.RuntimeParams["application_name"] = engineApplicationName()
	} else if !strings.HasPrefix(name, escalation.ApplicationName) {
		logger.Warn("the dsn sets an application_name that does not start with "+escalation.ApplicationName+
			": the console (pgdrain web) will not see this engine", "application_name", name)
	}
	// One connection stays open between ticks, so that the console sees the engine at all times.
	pcfg.MinConns = max(pcfg.MinConns, 1)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connecting to database: %w", err)
	}
	defer pool.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := file.EngineConfig(logger)
	cfg.Registerer = reg
	engine, err := escalation.New(pool, file.Notifiers(), cfg)
	if err != nil {
		return usagef("escalate: %v", err) // validated with the file: not expected
	}
	if file.Listen != "" {
		ln, err := net.Listen("tcp", file.Listen)
		if err != nil {
			return fmt.Errorf("listening for /metrics and /healthz: %w", err)
		}
		srv := &http.Server{Handler: engine.Handler(reg), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("serving /metrics and /healthz", "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownTimeout)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		logger.Info("serving /metrics and /healthz", "addr", ln.Addr().String())
	}
	logger.Info("escalation engine starting", "channels", file.ChannelNames(),
		"application_name", pcfg.ConnConfig.RuntimeParams["application_name"])
	err = engine.Run(ctx)
	logger.Log(ctx, levelOf(err), "escalation engine stopped", "err", err)
	return err
}
