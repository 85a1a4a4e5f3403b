package console

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// DefaultRefresh is how often the sampler reads outbox.stats and the pages refresh.
	DefaultRefresh = 5 * time.Second
	// MinRefresh is the shortest Refresh accepted: outbox.stats is one pass over the pending rows.
	MinRefresh = time.Second
	// DefaultWedgedAfter is how old a partition's oldest pending row must be to be listed as wedged.
	DefaultWedgedAfter = time.Minute
	// DefaultHistory is how much sampler history is kept for the throughput figures.
	DefaultHistory = 15 * time.Minute
	// DefaultSessionTTL is how long the cookie that a ?token= visit sets stays valid: a working day
	// or an on-call night, after which the browser must show the token again.
	DefaultSessionTTL = 12 * time.Hour
	// MinSessionTTL is the shortest SessionTTL accepted.
	MinSessionTTL = time.Minute
	// listLimit bounds every list a page shows (wedged partitions, poisoned rows, ladders).
	listLimit = 50
	// purgeChunk and purgeMaxRows bound one purge action: chunks of purgeChunk rows, each its own
	// short transaction (as `pgdrain purge --chunk`), at most purgeMaxRows rows per click so that
	// an HTTP request never runs for long. Click again (or use the CLI) for more.
	purgeChunk   = 5000
	purgeMaxRows = 100000
)

// Config configures a console Server.
type Config struct {
	// Reader is the pool the pages read through: outbox.stats, outbox.wedged_partitions,
	// outbox.queues, outbox.poisoned_rows, the alr tables. A login role in pgdrain_reader
	// (docs/security.md). Required.
	Reader *pgxpool.Pool
	// Operator is the pool actions run through (requeue_poisoned, purge_sent, resolve_alert). nil
	// makes the console read-only.
	Operator *pgxpool.Pool
	// ReadOnly serves the pages without any action, and refuses every POST with 403.
	ReadOnly bool
	// Token, when set, is required from every request: once as ?token=... (which sets a cookie
	// valid for SessionTTL), or as "Authorization: Bearer ...". It must not be blank or begin or
	// end with white space (a header could not carry it).
	Token string
	// SessionTTL is how long the cookie set by a ?token= visit is valid (the browser is told the
	// same, and the server checks the expiry signed into the cookie). Defaults to 12h
	// (DefaultSessionTTL); at least 1m (MinSessionTTL).
	SessionTTL time.Duration
	// BasicUser and BasicPassword, when set, require HTTP basic auth.
	BasicUser, BasicPassword string
	// Refresh is how often the sampler reads the gauges and the pages refresh. Defaults to 5s
	// (DefaultRefresh); at least 1s (MinRefresh).
	Refresh time.Duration
	// WedgedAfter is the older_than given to outbox.wedged_partitions. Defaults to 1m
	// (DefaultWedgedAfter).
	WedgedAfter time.Duration
	// History is how much sampler history is kept for the throughput figures. Defaults to 15m
	// (DefaultHistory).
	History time.Duration
	// Logger receives one line per action (who, what, result). Defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Refresh = cmp.Or(c.Refresh, DefaultRefresh)
	c.WedgedAfter = cmp.Or(c.WedgedAfter, DefaultWedgedAfter)
	c.History = cmp.Or(c.History, DefaultHistory)
	c.SessionTTL = cmp.Or(c.SessionTTL, DefaultSessionTTL)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Operator == nil {
		c.ReadOnly = true
	}
	return c
}

// Validate reports every problem of the configuration (with defaults applied), each starting
// with the field name.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Reader == nil {
		errs = append(errs, errors.New("Reader must be set: the pages read through it"))
	}
	if c.Refresh < MinRefresh {
		errs = append(errs, fmt.Errorf("Refresh must be at least %s, got %s", MinRefresh, c.Refresh))
	}
	if c.WedgedAfter < 0 {
		errs = append(errs, fmt.Errorf("WedgedAfter must not be negative, got %s", c.WedgedAfter))
	}
	if c.History < 2*c.Refresh {
		errs = append(errs, fmt.Errorf("History must be at least two Refresh intervals (%s), got %s", 2*c.Refresh, c.History))
	}
	if c.Token != "" && (strings.TrimSpace(c.Token) == "" || strings.TrimSpace(c.Token) != c.Token) {
		errs = append(errs, errors.New("Token must not be blank or begin or end with white space"))
	}
	if c.SessionTTL < MinSessionTTL {
		errs = append(errs, fmt.Errorf("SessionTTL must be at least %s, got %s", MinSessionTTL, c.SessionTTL))
	}
	if (c.BasicUser == "") != (c.BasicPassword == "") {
		errs = append(errs, errors.New("BasicUser and BasicPassword must be set together"))
	}
	return errors.Join(errs...)
}

// authenticated reports whether requests must prove who they are (token or basic auth).
func (c Config) authenticated() bool { return c.Token != "" || c.BasicUser != "" }
