package config

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/yamlfile"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

// File is an escalation engine's config file.
type File struct {
	// DSN is the PostgreSQL URL, for a login role that is a member of pgdrain_worker. Defaults to
	// the command's --dsn, $DATABASE_URL or the PG* environment.
	DSN string `yaml:"dsn"`
	// Listen is the address of the HTTP endpoint serving /metrics and /healthz (":9465"). Empty
	// turns it off.
	Listen string `yaml:"listen"`
	// Log configures the engine's log, written to standard error (as the relay's).
	Log yamlfile.Log `yaml:"log"`
	// Engine tunes the engine (escalation.Config); every field is optional.
	Engine Engine `yaml:"engine"`
	// Channels maps each channel the policies' steps name to its notifier. At least one.
	Channels map[string]Channel `yaml:"channels"`

	name string
}

// Engine is escalation.Config in the file. A zero field takes the engine's default.
type Engine struct {
	// BatchSize is how many due steps one take leases. Defaults to 100.
	BatchSize int `yaml:"batch_size"`
	// Lease is how long a taken step is hidden from other engines. Defaults to 2m.
	Lease time.Duration `yaml:"lease"`
	// Tick is the pause between takes when the last one was not full. Defaults to 1s.
	Tick time.Duration `yaml:"tick"`
	// StepTimeout bounds each delivery. Defaults to 10s.
	StepTimeout time.Duration `yaml:"step_timeout"`
	// DBTimeout bounds each SQL call. Defaults to 5s.
	DBTimeout time.Duration `yaml:"db_timeout"`
}

// Channel holds exactly one notifier's settings.
type Channel struct {
	// Webhook POSTs each step as JSON (escalation.WebhookPayload), signed as Standard Webhooks
	// describes.
	Webhook *Webhook `yaml:"webhook"`
}

// Webhook is an escalation.WebhookNotifier in the file.
type Webhook struct {
	// URL receives every step of the channel (http or https). Empty: each step's target is its URL
	// (the policy says where to post).
	URL string `yaml:"url"`
	// Secrets are the signing secrets, "whsec_<base64>", as the relay's webhook sink takes them:
	// every secret signs every request. At least one is required.
	Secrets []string `yaml:"secrets"`
	// Headers are sent with every request (an API key, a tenant). They may not set Content-Type,
	// the webhook-* headers or those HTTP controls, as for the relay's webhook sink.
	Headers map[string]string `yaml:"headers"`
}

// Load reads and validates the file at path; ${NAME} is looked up with os.LookupEnv.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading escalate config: %w", err)
	}
	return Parse(path, data, os.LookupEnv)
}

// Parse reads and validates a config file's contents; name is used in errors. Every problem is
// reported, one per line, as "name:LINE: field problem".
func Parse(name string, data []byte, lookupEnv func(string) (string, bool)) (*File, error) {
	f := &File{name: name}
	p, err := yamlfile.Decode(name, data, lookupEnv, f, "it must name the channels and their notifiers")
	if err != nil {
		return nil, err
	}
	f.validate(p)
	if err := p.Err(); err != nil {
		return nil, err
	}
	return f, nil
}

// placeholderURL stands for "each step's target" when a webhook's URL is checked by
// webhook.Config.Validate, which requires one.
const placeholderURL = "https://step-target.invalid/"

func (f *File) validate(p *yamlfile.Problems) {
	f.Log.Check(p, "log")
	yamlfile.CheckListen(p, f.Listen, "listen")
	p.FieldErrors([]string{"engine"}, reflect.TypeFor[Engine](), f.EngineConfig(nil).Validate())
	if len(f.Channels) == 0 {
		p.At([]string{"channels"}, "must name at least one channel and its notifier (webhook)")
	}
	for _, name := range f.channelNames() {
		c, path := f.Channels[name], []string{"channels", name}
		switch {
		case strings.TrimSpace(name) == "":
			p.At(path, "must be a channel name, as the policies' steps name it")
		case c.Webhook == nil:
			p.At(path, "must name one notifier: webhook")
		default:
			// The relay's webhook validation, for what the two share: the URL (when given), the
			// secrets, the headers.
			w := c.Webhook
			cfg := webhook.Config{URL: w.URL, Secrets: w.Secrets, Headers: w.Headers}
			if cfg.URL == "" {
				cfg.URL = placeholderURL
			}
			p.FieldErrors(append(path, "webhook"), reflect.TypeFor[Webhook](), cfg.Validate())
		}
	}
}

// channelNames returns the file's channels, sorted.
func (f *File) channelNames() []string {
	names := make([]string, 0, len(f.Channels))
	for name := range f.Channels {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// EngineConfig is the engine's configuration, with logger.
func (f *File) EngineConfig(logger *slog.Logger) escalation.Config {
	return escalation.Config{BatchSize: f.Engine.BatchSize, Lease: f.Engine.Lease, Tick: f.Engine.Tick,
		StepTimeout: f.Engine.StepTimeout, DBTimeout: f.Engine.DBTimeout, Logger: logger}
}

// Notifiers returns a notifier per channel. Its webhooks do not follow redirects (a redirect is an
// answer outside 2xx: a failed delivery), as the relay's webhook sink.
func (f *File) Notifiers() map[string]escalation.Notifier {
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	out := make(map[string]escalation.Notifier, len(f.Channels))
	for name, c := range f.Channels {
		if w := c.Webhook; w != nil {
			out[name] = escalation.WebhookNotifier{URL: w.URL, Secrets: w.Secrets, Headers: w.Headers, Client: client}
		}
	}
	return out
}

// ChannelNames are the channels the file serves, sorted.
func (f *File) ChannelNames() []string { return f.channelNames() }

// Logger returns the logger the file asks for, writing to w.
func (f *File) Logger(w io.Writer) *slog.Logger { return f.Log.Logger(w) }
