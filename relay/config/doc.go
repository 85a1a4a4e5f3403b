// Package config reads the YAML file of `pgdrain relay --config FILE`: which queues go to which
// sink (or, fanned out, to which sinks: relay.FanOut), with each sink's claim mode, concurrency,
// batch size, timeouts and lease. Every problem
// is reported at once, each naming the file, the line and the field ("relay.yaml:12:
// queues[0].sink.webhook.url must be set ..."); unknown fields are errors, so a typo is never
// silently a default. ${NAME} in a value is replaced by the environment variable NAME (an unset
// one is an error), so secrets and DSNs stay out of the file.
//
// YAML, through go.yaml.in/yaml/v3 (the YAML organisation's maintained yaml.v3, already in
// pgdrain's module graph through goose): it is what operators write for Kubernetes, Compose and
// Prometheus, it has comments, and its node tree keeps the line of every value.
package config
