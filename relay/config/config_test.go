package config_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/config"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

const good = `# two queues
dsn: ${RELAY_DSN}
listen: ":9464"
log: {level: debug, format: text}
queues:
  - queue: public.orders
    claim_mode: lock
    concurrency: ${WORKERS}
    batch_size: 4
    timeout: 2s
    failure_log_interval: 30s
    wedge_warn_after: 2m
    run_length: 4
    trickle_interval: 50ms
    sink:
      webhook:
        url: https://hooks.example.com/orders
        secrets: ["${HOOK_SECRET}"]
        headers: {Authorization: "Bearer abc"}
  - queue: public.shipments
    concurrency: 16
    batch_size: 16
    async_results: true
    sink:
      kafka: {brokers: ["kafka-1:9092", "kafka-2:9092"], topic_field: topic}
  - queue: public.invoices
    sink:
      jetstream: {url: "nats://nats:4222", subject: invoices.events}
  - queue: audit
    sink:
      webhook: {url: "http://127.0.0.1:8080/", secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw], body: payload}
`

func TestParse_AGoodFileBuildsItsRoutes(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("relay.yaml", []byte(good), env(map[string]string{
		"RELAY_DSN": "postgres://relay@db/app", "WORKERS": "8", "HOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}))
	require.NoError(t, err)
	require.Equal(t, "postgres://relay@db/app", f.DSN)
	require.Equal(t, 8, f.Queues[0].Concurrency, "a plain ${VAR} is typed after expansion")
	require.Equal(t, []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, f.Queues[0].Sink.Webhook.Secrets)
	routes, err := f.Routes(context.Background())
	require.NoError(t, err)
	require.Len(t, routes, 4)
	require.Equal(t, "public.orders", routes[0].Queue)
	require.Equal(t, "webhook", routes[0].SinkKind)
	require.Equal(t, drainer.ClaimLock, routes[0].Drainer.ClaimMode)
	require.Equal(t, 8, routes[0].Drainer.ApplyConcurrency)
	require.Equal(t, 4, routes[0].BatchSize)
	require.Equal(t, 2*time.Second, routes[0].Drainer.ApplyTimeout)
	require.Equal(t, 30*time.Second, routes[0].FailureLogInterval)
	require.Equal(t, 2*time.Minute, routes[0].WedgeWarnAfter)
	require.Equal(t, 4, routes[0].Drainer.RunLength)
	require.Equal(t, 50*time.Millisecond, routes[0].Drainer.TrickleInterval)
	require.Zero(t, routes[1].Drainer.RunLength, "unset: the drainer's default")
	require.True(t, routes[1].Drainer.AsyncResults)
	require.False(t, routes[0].Drainer.AsyncResults, "unset: off")
	require.Equal(t, "kafka", routes[1].SinkKind)
	require.Equal(t, 16, routes[1].BatchSize)
	require.Equal(t, "jetstream", routes[2].SinkKind)
	require.Equal(t, drainer.ClaimLease, routes[3].Drainer.ClaimMode)
	for _, r := range routes {
		require.NoError(t, r.Validate())
		require.NoError(t, r.Sink.Close())
	}
}

// Every problem at once, each with the file, the line and the field, in the file's own words.
func TestParse_NamesTheLineAndFieldOfEveryProblem(t *testing.T) {
	t.Parallel()
	bad := `listen: ":9464"
log: {level: loud}
queues:
  - queue: public.orders
    claim_mode: lock
    concurrency: 2
    batch_size: 4
    timeout: 5s
    sink:
      webhook:
        url: ftp://nowhere
        secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, nope]
  - queue: public.ORDERS
    lease: 3s
    sink: {}
  - queue: public.refunds
    run_length: 2000
    sink:
      webhook: {url: "http://127.0.0.1:8080/", secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
  - queue: public.returns
    trickle_interval: 2s
    sink:
      webhook: {url: "http://127.0.0.1:8080/", secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
  - queue: public.credits
    claim_mode: lock
    async_results: true
    sink:
      webhook: {url: "http://127.0.0.1:8080/", secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
`
	_, err := config.Parse("relay.yaml", []byte(bad), env(nil))
	require.Error(t, err)
	require.Equal(t, []string{
		`relay.yaml:2: log.level must be debug, info, warn or error, got "loud"`,
		`relay.yaml:7: queues[0].batch_size must be between 1 and concurrency (2): a batch groups events applied at the same time, got 4`,
		`relay.yaml:11: queues[0].sink.webhook.url must be an absolute http:// or https:// URL, got "ftp://nowhere"`,
		`relay.yaml:12: queues[0].sink.webhook.secrets[1] must start with "whsec_"`,
		`relay.yaml:14: queues[1].lease must be longer than timeout (5s) plus LeaseMargin (1s), got 3s`,
		`relay.yaml:15: queues[1].sink must name one sink: webhook, kafka, jetstream`,
		`relay.yaml:13: queues[1].queue is already relayed by queues[0]: one entry per queue`,
		`relay.yaml:17: queues[2].run_length must be between 1 and 1000, got 2000`,
		`relay.yaml:21: queues[3].trickle_interval must be at most MaxTrickleInterval (1s), or negative to turn it off, got 2s`,
		`relay.yaml:26: queues[4].async_results is for lease mode only: a lock-mode transaction may carry the Applier's own writes, got claim_mode lock`,
	}, strings.Split(err.Error(), "\n"))
}

func TestParse_UnknownFieldsTypesAndEnvironment(t *testing.T) {
	t.Parallel()
	_, err := config.Parse("r.yaml", []byte("queues:\n  - queue: q\n    concurrenc: 4\n    sink:\n      webhok: {}\n"), env(nil))
	require.EqualError(t, err, "r.yaml:3: queues[0].concurrenc is not a known field (known: async_results, batch_linger, batch_size, claim_mode, "+
		"concurrency, failure_log_interval, fanout, lease, lock_transaction_timeout, poll_fallback, queue, repair_interval, run_length, sink, sinks, "+
		"timeout, trickle_interval, wedge_warn_after)\n"+
		"r.yaml:5: queues[0].sink.webhok is not a known field (known: jetstream, kafka, webhook)")

	_, err = config.Parse("r.yaml", []byte("queues:\n  - queue: q\n    concurrency: many\n    timeout: soon\n"), env(nil))
	require.ErrorContains(t, err, `r.yaml:3: queues[0].concurrency must be a whole number, got "many"`)
	require.ErrorContains(t, err, `r.yaml:4: queues[0].timeout must be a duration with a unit (250ms, 5s, 1m30s), got "soon"`)

	_, err = config.Parse("r.yaml", []byte("dsn: ${NOPE}\nqueues: []\n"), env(nil))
	require.EqualError(t, err, "r.yaml:1: ${NOPE} is not set in the environment\n"+
		"r.yaml:2: queues must list at least one queue and its sink")

	_, err = config.Parse("r.yaml", []byte("queues: [\n"), env(nil))
	require.EqualError(t, err, "r.yaml:1: did not find expected node content")

	_, err = config.Parse("r.yaml", nil, env(nil))
	require.EqualError(t, err, "r.yaml: the file is empty: it must list queues")
}

func TestParse_TwoSinksOrAKafkaProblem(t *testing.T) {
	t.Parallel()
	_, err := config.Parse("r.yaml", []byte(`queues:
  - queue: q
    sink:
      webhook: {url: "http://x/", secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
      kafka:
        brokers: [k:9092]
        topic: orders
        topic_field: topic
`), env(nil))
	require.EqualError(t, err, "r.yaml:3: queues[0].sink must name one sink, got webhook and kafka\n"+
		"r.yaml:7: queues[0].sink.kafka.topic must be empty when topic_field is set: the topic comes from one place")
}

// A value of the wrong type names its field and hides nothing: every other problem of the file is
// reported with it, and nothing that only follows from it.
func TestParse_AWrongTypeNamesItsFieldAndHidesNothing(t *testing.T) {
	t.Parallel()
	_, err := config.Parse("r.yaml", []byte(`log: {level: loud, format: [json]}
queues:
  - queue: public.orders
    timeout: 3
    concurrency: many
    claim_mode: fast
    batch_size: [1]
    sink:
      webhook: {url: ftp://x, secrets: whsec_x, body: xml}
  - queue: public.shipments
    lease: 1s
    sink: kafka
`), env(nil))
	require.Error(t, err)
	require.Equal(t, []string{
		`r.yaml:1: log.format must be a single value, got a list`,
		`r.yaml:4: queues[0].timeout must be a duration with a unit (250ms, 5s, 1m30s), got "3"`,
		`r.yaml:5: queues[0].concurrency must be a whole number, got "many"`,
		`r.yaml:7: queues[0].batch_size must be a whole number, got a list`,
		`r.yaml:9: queues[0].sink.webhook.secrets must be a list ([a, b]), got "whsec_x"`,
		`r.yaml:12: queues[1].sink must be a mapping (key: value), got "kafka"`,
		`r.yaml:1: log.level must be debug, info, warn or error, got "loud"`,
		`r.yaml:6: queues[0].claim_mode must be lease or lock, got "fast"`,
		`r.yaml:9: queues[0].sink.webhook.url must be an absolute http:// or https:// URL, got "ftp://x"`,
		`r.yaml:9: queues[0].sink.webhook.body must be "envelope" or "payload", got "xml"`,
		`r.yaml:11: queues[1].lease must be longer than timeout (5s) plus LeaseMargin (1s), got 1s`,
	}, strings.Split(err.Error(), "\n"))
}

// An unset ${NAME} hides nothing either: the file's other problems are reported with it, but not
// those of the fields it left empty.
func TestParse_AnUnsetVariableHidesNothingElse(t *testing.T) {
	t.Parallel()
	_, err := config.Parse("r.yaml", []byte(`dsn: ${RELAY_DSN}
queues:
  - queue: public.orders
    claim_mode: fast
    timeout: "${TIMEOUT}"
    sink:
      webhook:
        url: ${HOOK_URL}
        secrets: ["${HOOK_SECRET}", nope]
`), env(nil))
	require.Error(t, err)
	require.Equal(t, []string{
		`r.yaml:1: ${RELAY_DSN} is not set in the environment`,
		`r.yaml:5: ${TIMEOUT} is not set in the environment`,
		`r.yaml:8: ${HOOK_URL} is not set in the environment`,
		`r.yaml:9: ${HOOK_SECRET} is not set in the environment`,
		`r.yaml:4: queues[0].claim_mode must be lease or lock, got "fast"`,
		`r.yaml:9: queues[0].sink.webhook.secrets[1] must start with "whsec_"`,
	}, strings.Split(err.Error(), "\n"))
}

// A sink's problems are in the file's words: its keys, never the Go fields behind them.
func TestParse_SinkProblemsNameTheFilesKeys(t *testing.T) {
	t.Parallel()
	_, err := config.Parse("r.yaml", []byte(`queues:
  - queue: a
    sink: {kafka: {brokers: [k:9092]}}
  - queue: b
    sink: {jetstream: {url: "nats://n", subject: x, allowed_subjects: [x]}}
  - queue: c
    sink: {jetstream: {url: "nats://n"}}
`), env(nil))
	require.EqualError(t, err, "r.yaml:3: queues[0].sink.kafka.topic must be set, or topic_field to take each event's topic from its payload\n"+
		"r.yaml:5: queues[1].sink.jetstream.allowed_subjects must be empty unless subject_field is set: they limit the subjects payloads name\n"+
		"r.yaml:7: queues[2].sink.jetstream.subject must be set, or subject_field to take each event's subject from its payload")
}

// One queue, two sinks: each sink is a route on its own queue (<queue>__<name>) with its own
// settings, and the queue is fanned out.
func TestParse_AQueueFannedOutToSinks(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("relay.yaml", []byte(`queues:
  - queue: public.orders
    fanout: {batch_size: 200, poll_fallback: 10s}
    sinks:
      - name: hooks
        concurrency: 8
        sink:
          webhook: {url: "https://hooks.example.com/", secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
      - name: stream
        claim_mode: lock
        concurrency: 4
        batch_size: 4
        sink:
          jetstream: {url: "nats://nats:4222", subject: orders.events}
  - queue: public.audit
    sink:
      webhook: {url: "https://audit.example.com/", secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
`), env(nil))
	require.NoError(t, err)
	routes, err := f.Routes(context.Background())
	require.NoError(t, err)
	require.Len(t, routes, 3)
	require.Equal(t, "public.orders__hooks", routes[0].Queue)
	require.Equal(t, "webhook", routes[0].SinkKind)
	require.Equal(t, 8, routes[0].Drainer.ApplyConcurrency)
	require.Equal(t, "public.orders__stream", routes[1].Queue)
	require.Equal(t, "jetstream", routes[1].SinkKind)
	require.Equal(t, drainer.ClaimLock, routes[1].Drainer.ClaimMode)
	require.Equal(t, 4, routes[1].BatchSize)
	require.Equal(t, "public.audit", routes[2].Queue)
	require.Equal(t, []relay.FanOut{{Queue: "public.orders", BatchSize: 200, PollFallback: 10 * time.Second}}, f.FanOuts())
	for _, r := range routes {
		require.NoError(t, r.Validate())
		require.NoError(t, r.Sink.Close())
	}
}

// A fan-out's problems name their fields: a sink's name, its settings, what is set beside sinks,
// the fan-out's own settings, and a queue drained twice.
func TestParse_FanOutProblemsNameTheirFields(t *testing.T) {
	t.Parallel()
	_, err := config.Parse("r.yaml", []byte(`queues:
  - queue: public.orders
    concurrency: 4
    sink: {kafka: {brokers: [k:9092], topic: t}}
    fanout: {batch_size: 0, timeout: -1s}
    sinks:
      - name: Hooks
        sink: {kafka: {brokers: [k:9092], topic: t}}
      - name: kafka
        batch_size: 2
        sink: {kafka: {brokers: [k:9092]}}
      - name: kafka
        sink: {kafka: {brokers: [k:9092], topic: t}}
      - sink: {kafka: {brokers: [k:9092], topic: t}}
      - name: a__b
        claim_mode: fast
  - queue: public.orders
    sink: {kafka: {brokers: [k:9092], topic: t}}
  - queue: public.orders__kafka
    sink: {kafka: {brokers: [k:9092], topic: t}}
  - queue: public.audit
    fanout: {batch_size: 10}
    sink: {kafka: {brokers: [k:9092], topic: t}}
`), env(nil))
	require.Error(t, err)
	require.Equal(t, []string{
		`r.yaml:3: queues[0].concurrency is set per sink when the queue is fanned out: move it under each of sinks`,
		`r.yaml:4: queues[0].sink and sinks exclude each other: one sink, or a list of named sinks each with its own queue`,
		`r.yaml:5: queues[0].fanout.timeout must be positive (or 0 for the default), got -1s`,
		`r.yaml:7: queues[0].sinks[0].name must be lower case letters and digits, with single underscores between them (__ separates it from the queue's name), got "Hooks"`,
		`r.yaml:10: queues[0].sinks[1].batch_size must be between 1 and concurrency (1): a batch groups events applied at the same time, got 2`,
		`r.yaml:11: queues[0].sinks[1].sink.kafka.topic must be set, or topic_field to take each event's topic from its payload`,
		`r.yaml:12: queues[0].sinks[2].name is already the name of sinks[1]`,
		`r.yaml:14: queues[0].sinks[3].name must be set: the sink delivers the events of the queue public.orders__<name>`,
		`r.yaml:15: queues[0].sinks[4].name must be lower case letters and digits, with single underscores between them (__ separates it from the queue's name), got "a__b"`,
		`r.yaml:16: queues[0].sinks[4].claim_mode must be lease or lock, got "fast"`,
		`r.yaml:15: queues[0].sinks[4].sink must name one sink: webhook, kafka, jetstream`,
		`r.yaml:17: queues[1].queue is already fanned out by queues[0]: one entry per queue`,
		`r.yaml:19: queues[2].queue is already relayed by queues[0].sinks[1]: one entry per queue`,
		`r.yaml:22: queues[3].fanout is only for a queue fanned out to sinks (sinks)`,
	}, strings.Split(err.Error(), "\n"))
}

// A timeout too long for any lease is reported as the timeout, not as the lease derived from it
// (a huge one made that lease negative), and a listen address net.Listen would refuse is reported
// by --check, before the relay starts.
func TestParse_ATimeoutAndListenAddressAreCheckedAsWritten(t *testing.T) {
	t.Parallel()
	_, err := config.Parse("r.yaml", []byte(`listen: nothost
queues:
  - queue: public.orders
    timeout: 1000h
    sink: {kafka: {brokers: [k:9092], topic: t}}
  - queue: public.refunds
    timeout: 2562047h
    sink: {kafka: {brokers: [k:9092], topic: t}}
  - queue: public.returns
    timeout: 13h
    sink: {kafka: {brokers: [k:9092], topic: t}}
`), env(nil))
	require.Error(t, err)
	require.Equal(t, []string{
		`r.yaml:1: listen must be host:port or :port (":9464"), got "nothost"`,
		`r.yaml:4: queues[0].timeout must be at most 24h0m0s, got 1000h0m0s`,
		`r.yaml:7: queues[1].timeout must be at most 24h0m0s, got 2562047h0m0s`,
		`r.yaml:9: queues[2].lease must be at most 24h0m0s, got its default 2*timeout + LeaseMargin = 26h0m1s: lower timeout or set lease`,
	}, strings.Split(err.Error(), "\n"))

	_, err = config.Parse("r.yaml", []byte(`listen: ":http-alt"
queues:
  - queue: public.orders
    sink: {kafka: {brokers: [k:9092], topic: t}}
`), env(nil))
	require.EqualError(t, err, `r.yaml:1: listen must end in a port number from 0 to 65535, got ":http-alt"`)
	for _, good := range []string{":9464", "127.0.0.1:0", "[::1]:9464", "relay.internal:9464"} {
		_, err = config.Parse("r.yaml", []byte(`listen: "`+good+`"
queues:
  - queue: public.orders
    sink: {kafka: {brokers: [k:9092], topic: t}}
`), env(nil))
		require.NoError(t, err, good)
	}
}
