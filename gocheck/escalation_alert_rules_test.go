package gocheck

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// Every outcome of a taken step that means nobody was paged has an alert in
// docs/prometheus-alerts.yml: a step of a channel no notifier serves (unserved), a step recorded
// and never journaled, and a delivery that failed. A failed step is not retried (at most once: the
// ladder's next step is), so a channel that always fails (a revoked token, a wrong URL) pages
// nobody, and before there was no rule for it: the failures showed only as a Warn line per step and
// pgdrain_escalation_steps_total{outcome="failed"}, which nothing watched.
func TestEscalation_EveryPageNotSentHasAnAlertRule(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/prometheus-alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Expr   string            `yaml:"expr"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	for _, want := range []string{
		"pgdrain_escalation_unserved_steps_total",
		"pgdrain_escalation_unjournaled_steps",
		`pgdrain_escalation_steps_total{outcome="failed"}`,
	} {
		found := false
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				if strings.Contains(r.Expr, want) {
					found = true
					require.Equal(t, "page", r.Labels["severity"], "%s: a page not sent pages someone", r.Alert)
				}
			}
		}
		require.True(t, found, "docs/prometheus-alerts.yml has no rule on %s", want)
	}
}
