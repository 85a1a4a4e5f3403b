package escalation

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The zero Config is valid, as its doc says: Validate applies the defaults before it checks.
func TestConfig_ZeroValueIsValid(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{}.Validate())
	d := Config{}.withDefaults()
	require.Equal(t, DefaultBatchSize, d.BatchSize)
	require.Equal(t, DefaultLease, d.Lease)
	require.Equal(t, DefaultTick, d.Tick)
	require.Equal(t, DefaultStepTimeout, d.StepTimeout)
	require.Equal(t, DefaultDBTimeout, d.DBTimeout)
	require.NotNil(t, d.Logger)
}

// Validate reports every problem at once, one line each, each line starting with the field name.
func TestConfig_ValidateReportsEveryFieldByName(t *testing.T) {
	t.Parallel()
	err := Config{BatchSize: MaxBatchSize + 1, Lease: -1, Tick: -time.Second, StepTimeout: -1, DBTimeout: -1}.Validate()
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	require.Equal(t, []string{
		"BatchSize must be between 1 and 10000, got 10001",
		"Lease must be between 1ms and 24h0m0s, got -1ns",
		"Tick must be positive, got -1s",
		"StepTimeout must be positive, got -1ns",
		"DBTimeout must be positive, got -1ns",
	}, lines)
	require.ErrorContains(t, Config{Lease: MaxLease + 1}.Validate(), "Lease must be between")
	require.ErrorContains(t, Config{Lease: MinLease / 2}.Validate(), "Lease must be between")
	require.NoError(t, Config{Lease: MinLease, BatchSize: MaxBatchSize}.Validate())
}

// New reports every problem of its arguments together: the pool, the config and the notifiers.
func TestNew_ReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := New(nil, map[string]Notifier{"": NotifierFunc(nil), "sms": nil}, Config{BatchSize: -1})
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		"pool must not be nil",
		"BatchSize must be between 1 and 10000, got -1",
		"notifiers must not have an empty channel name",
		`notifiers["sms"] must not be nil`,
	} {
		require.Contains(t, msg, want)
	}
}
