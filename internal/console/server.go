package console

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgdrain/pgdrain/internal/version"
)

// Server is the console: its handler and its sampler.
type Server struct {
	cfg     Config
	key     []byte
	sampler *sampler
	// reading bounds the pages' reads in flight to the part of the reader pool the sampler leaves
	// them (it takes at most half): open tabs of a slow page took every connection, and the
	// sampler's reads of other queues timed out behind them ("a lock held on the table?").
	reading chan struct{}
	// cookies are this console's cookie names (cookieNames).
	cookies cookieNames
	pages   *pages
	handler http.Handler
}

// New returns a console for cfg. Call Sample (or Run) before serving so that the first page has
// figures.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, key: make([]byte, 32), sampler: newSampler(cfg.Reader, cfg.Refresh, cfg.History, cfg.WedgedAfter)}
	s.reading = make(chan struct{}, max(1, int(cfg.Reader.Config().MaxConns)-cap(s.sampler.slots)))
	_, _ = rand.Read(s.key)
	s.cookies = newCookieNames(s.mac("cookie-names", ""))
	p, err := loadPages()
	if err != nil {
		return nil, err
	}
	s.pages = p

	mux := http.NewServeMux()
	mux.Handle("GET /static/", filesOnly(staticFS))
	mux.HandleFunc("GET /{$}", s.queuesPage)
	mux.HandleFunc("GET /queues/{queue}", s.queuePage)
	mux.HandleFunc("GET /escalations", s.escalationsPage)
	mux.HandleFunc("POST /actions/requeue", s.requeueAction)
	mux.HandleFunc("POST /actions/purge", s.purgeAction)
	mux.HandleFunc("POST /actions/resolve", s.resolveAction)
	mux.HandleFunc("POST /actions/release", s.releaseAction)
	mux.HandleFunc("POST /actions/skip", s.skipAction)
	mux.HandleFunc("POST /actions/retry", s.retryAction)
	mux.HandleFunc("POST /actions/dismiss", s.dismissAction)
	mux.HandleFunc("POST /actions/acknowledge", s.acknowledgeAction)
	s.handler = s.access(s.readOnly(s.csrf(mux)))
	return s, nil
}

// filesOnly serves the files of fsys and 404 for anything else: a directory gets no listing.
func filesOnly(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
		if info, err := fs.Stat(fsys, name); err != nil || !info.Mode().IsRegular() || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}

// schemaCheckTimeout bounds CheckSchema's one query.
const schemaCheckTimeout = 10 * time.Second

// CheckSchema refuses an outbox schema older than the console needs (outbox.version() against
// version.OutboxNeeded, as the drainer's check): an error matching version.ErrSchemaTooOld that
// says where the schema is and what to run. The alr schema is optional (the escalations page says
// when it is not installed). `pgdrain web` calls it before it listens.
func (s *Server) CheckSchema(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, schemaCheckTimeout)
	defer cancel()
	return version.Check(ctx, s.cfg.Reader, "outbox", version.OutboxNeeded, "this console")
}

// Handler serves the pages, the assets and (unless read-only) the actions.
func (s *Server) Handler() http.Handler { return s.handler }

// Sample reads every queue's gauges once; Run does it every Config.Refresh.
func (s *Server) Sample(ctx context.Context) { s.sampler.sampleOnce(ctx) }

// Run samples, then serves on ln until ctx ends, then shuts down within 5 seconds.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	s.Sample(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.sampler.run(ctx, s.cfg.Refresh)
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serving the console: %w", err)
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Still open after the grace: a request that outlived it, or a browser's speculative
		// connection that never sent one (net/http waits up to 5 seconds for its first request
		// before it counts as idle). Being told to stop is not a failure: close them.
		s.cfg.Logger.Warn("console shutdown: closing connections still open after the grace", "err", err)
		if err := srv.Close(); err != nil {
			return fmt.Errorf("shutting the console down: %w", err)
		}
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the console: %w", err)
	}
	return nil
}

// readOnly refuses every POST before anything else looks at it.
func (s *Server) readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.ReadOnly && r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.cfg.Logger.Warn("console action refused: read-only", "who", who(r), "remote", r.RemoteAddr, "path", r.URL.Path)
			http.Error(w, "this console is read-only (pgdrain web --read-only): no actions", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// describe keeps PostgreSQL's message and SQLSTATE in one line, as the CLI prints them.
func describe(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg := pgErr.Message
		if pgErr.Code == "42501" {
			msg += " (the console's role lacks a privilege: see docs/security.md, \"The console\")"
		}
		return fmt.Sprintf("%s (SQLSTATE %s)", msg, pgErr.Code)
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// sqlState returns err's SQLSTATE, or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// readSlot waits for a page read's turn (see Server.reading) and returns its release; ok is false
// when ctx ended first.
func (s *Server) readSlot(ctx context.Context) (release func(), ok bool) {
	select {
	case s.reading <- struct{}{}:
		return func() { <-s.reading }, true
	case <-ctx.Done():
		return nil, false
	}
}

// cookieNames are the names of a console's cookies: a fixed prefix and a part of its own (from its
// key). A browser keeps cookies by name, host and path, not port: two consoles on one host (two
// SSH tunnels to two environments) each replaced the other's cookies of the same name, and each
// refused the other's next action (403) or asked for its token again.
type cookieNames struct{ csrf, auth, flash string }

func newCookieNames(unique string) cookieNames {
	u := unique[:12]
	return cookieNames{csrf: "pgdrain_console_csrf_" + u, auth: "pgdrain_console_auth_" + u, flash: "pgdrain_console_flash_" + u}
}
