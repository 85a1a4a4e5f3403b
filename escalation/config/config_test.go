package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/escalation/config"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

const good = `# the on-call ladder
dsn: ${ESCALATE_DSN}
listen: ":9465"
log: {level: debug, format: text}
engine:
  batch_size: ${BATCH}
  lease: 30s
  tick: 250ms
  step_timeout: 5s
  db_timeout: 3s
channels:
  pager:
    webhook:
      url: https://pager.example.com/hooks/pgdrain
      secrets: ["${PAGER_SECRET}"]
      headers: {X-Team: sre}
  webhook:
    webhook: {secrets: [` + secret + `]}
`

func TestParse_AGoodFileBuildsItsEngineAndNotifiers(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("escalate.yaml", []byte(good), env(map[string]string{
		"ESCALATE_DSN": "postgres://esc@db/app", "BATCH": "50", "PAGER_SECRET": secret}))
	require.NoError(t, err)
	require.Equal(t, "postgres://esc@db/app", f.DSN)
	require.Equal(t, ":9465", f.Listen)
	cfg := f.EngineConfig(nil)
	require.Equal(t, escalation.Config{BatchSize: 50, Lease: 30 * time.Second, Tick: 250 * time.Millisecond,
		StepTimeout: 5 * time.Second, DBTimeout: 3 * time.Second}, cfg)
	require.NoError(t, cfg.Validate())
	require.Equal(t, []string{"pager", "webhook"}, f.ChannelNames())
	ns := f.Notifiers()
	pager := ns["pager"].(escalation.WebhookNotifier)
	require.Equal(t, "https://pager.example.com/hooks/pgdrain", pager.URL)
	require.Equal(t, []string{secret}, pager.Secrets)
	require.Equal(t, map[string]string{"X-Team": "sre"}, pager.Headers)
	require.NotNil(t, pager.Client.CheckRedirect, "redirects are answers, not followed")
	require.Empty(t, ns["webhook"].(escalation.WebhookNotifier).URL, "no url: each step's target is its URL")
}

// Every problem is reported at once, each with its line and the field's key in the file; what only
// follows from another problem is not repeated.
func TestParse_NamesEveryProblemByItsKeyAndLine(t *testing.T) {
	t.Parallel()
	_, err := config.Parse("escalate.yaml", []byte(`log: {level: loud}
engine:
  batch_size: 20000
  lease: -1s
  tick: soon
  step_timout: 5s
channels:
  pager:
    webhook:
      url: "ftp://pager.example.com/"
      secrets: [whsec_short, "${UNSET_SECRET}"]
      headers: {Content-Type: text/plain}
  sms: {}
`), env(nil))
	require.Error(t, err)
	require.Equal(t, []string{
		"escalate.yaml:11: ${UNSET_SECRET} is not set in the environment",
		`escalate.yaml:5: engine.tick must be a duration with a unit (250ms, 5s, 1m30s), got "soon"`,
		"escalate.yaml:6: engine.step_timout is not a known field (known: batch_size, db_timeout, lease, step_timeout, tick)",
		`escalate.yaml:1: log.level must be debug, info, warn or error, got "loud"`,
		"escalate.yaml:3: engine.batch_size must be between 1 and 10000, got 20000",
		"escalate.yaml:4: engine.lease must be between 1ms and 24h0m0s, got -1s",
		`escalate.yaml:10: channels.pager.webhook.url must be an absolute http:// or https:// URL, got "ftp://pager.example.com/"`,
		"escalate.yaml:11: channels.pager.webhook.secrets[0] must be whsec_ followed by base64: illegal base64 data at input byte 4",
		"escalate.yaml:12: channels.pager.webhook.headers may not set Content-Type: the sink or HTTP sets it",
		"escalate.yaml:13: channels.sms must name one notifier: webhook",
	}, strings.Split(err.Error(), "\n"), "the unset secret is reported once, not again as a bad secret")

	_, err = config.Parse("escalate.yaml", []byte(`channels:
  pager:
    webhook:
      secrets: [whsec_c2hvcnQ=]
`), env(nil))
	require.EqualError(t, err, "escalate.yaml:4: channels.pager.webhook.secrets[0] must hold a key of 24 to 64 bytes, as the specification asks, got 5")

	_, err = config.Parse("escalate.yaml", []byte(`listen: nothost
channels:
  webhook:
    webhook: {secrets: [`+secret+`]}
`), env(nil))
	require.EqualError(t, err, `escalate.yaml:1: listen must be host:port or :port (":9464"), got "nothost"`,
		"--check finds a listen address net.Listen would refuse")

	_, err = config.Parse("escalate.yaml", []byte("dsn: x\n"), env(nil))
	require.EqualError(t, err, "escalate.yaml:1: channels must name at least one channel and its notifier (webhook)")
	_, err = config.Parse("escalate.yaml", nil, env(nil))
	require.EqualError(t, err, "escalate.yaml: the file is empty: it must name the channels and their notifiers")
}
