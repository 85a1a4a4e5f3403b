package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/config"
)

// httpShutdownTimeout bounds closing the metrics endpoint once the relay has stopped.
const httpShutdownTimeout = 5 * time.Second

var relayCommand = command{
	name: "relay", minArgs: 0, maxArgs: 0, ownsConnections: true,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		path := fs.String("config", "", "the relay's YAML config file")
		check := fs.Bool("check", false, "validate the config file and exit")
		var file *config.File
		validate := func() error {
			if *path == "" {
				return usagef("relay: --config FILE is required")
			}
			f, err := config.Load(*path)
			if err != nil {
				// Every problem on its own line, each naming the file, line and field.
				return fileError{"relay: invalid config:\n" + err.Error()}
			}
			file = f
			return nil
		}
		return validate, func(ctx context.Context, e env, _ []string) error {
			if *check {
				fmt.Fprintf(e.out, "%s: ok, %d queue(s)\n", *path, len(file.Queues))
				return nil
			}
			return runRelay(ctx, e, file)
		}
	},
}

// runRelay runs the relay until ctx ends (SIGTERM, SIGINT), then shuts it down gracefully: the
// drainers record the deliveries in flight, the sinks flush and close, the endpoint closes last.
func runRelay(ctx context.Context, e env, file *config.File) error {
	logger := file.Logger(e.errOut)
	pcfg, err := pgxpool.ParseConfig(cmp.Or(file.DSN, e.dsn))
	if err != nil {
		return usagef("relay: dsn (in the config, or --dsn, DATABASE_URL, the PG* environment) is not a valid PostgreSQL connection string: %v", err)
	}
	if _, ok := pcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		pcfg.ConnConfig.RuntimeParams["application_name"] = "pgdrain-relay"
	}
	fanOuts := file.FanOuts()
	if !strings.Contains(cmp.Or(file.DSN, e.dsn), "pool_max_conns") {
		// A lock-mode queue (and a fan-out) holds a connection for each batch; leave room for
		// claims and results.
		drainers := len(fanOuts)
		for _, q := range file.Queues {
			drainers += max(1, len(q.Sinks))
		}
		pcfg.MaxConns = max(pcfg.MaxConns, int32(2*drainers+2))
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connecting to database: %w", err)
	}
	defer pool.Close()

	routes, err := file.Routes(ctx)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r, err := relay.New(pool, routes, relay.WithLogger(logger), relay.WithMetrics(reg), relay.WithFanOut(fanOuts...))
	if err != nil {
		for _, rt := range routes {
			_ = rt.Sink.Close()
		}
		return err
	}
	if file.Listen != "" {
		ln, err := net.Listen("tcp", file.Listen)
		if err != nil {
			return fmt.Errorf("listening for /metrics and /healthz: %w", err)
		}
		srv := &http.Server{Handler: r.Handler(reg), ReadHeaderTimeout: 5 * time.Second}
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
	logger.Info("relay starting", "queues", len(routes), "fan_outs", len(fanOuts))
	err = r.Run(ctx)
	logger.Log(ctx, levelOf(err), "relay stopped", "err", err)
	if err != nil {
		return relayFailure{fmt.Errorf("relay: %w", err)}
	}
	return nil
}

func levelOf(err error) slog.Level {
	if err != nil {
		return slog.LevelError
	}
	return slog.LevelInfo
}
