// Package config reads the YAML file of `pgdrain escalate --config FILE`: the database, the
// engine's settings (escalation.Config) and one notifier per channel the escalation policies use,
// for now a webhook signed as the relay's webhook sink signs events (Standard Webhooks). The file
// follows the relay's conventions (package relay/config, through internal/yamlfile): every problem
// is reported at once, each naming the file, the line and the field by its key in the file
// ("escalate.yaml:7: engine.lease must be between ..."); unknown fields are errors; ${NAME} in a
// value is replaced by the environment variable NAME (an unset one is an error), so secrets and
// DSNs stay out of the file. See docs/escalate.md.
package config
