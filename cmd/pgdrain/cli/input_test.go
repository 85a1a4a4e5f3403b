package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runOffline runs pgdrain against a DSN nobody answers: a usage error is reported before any
// connection (exit 2), anything that gets past the checks fails to connect (exit 3).
func runOffline(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), append([]string{"--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}, args...), &out, &errOut)
	return code, errOut.String()
}

// --refresh is bounded above too (a day), before anything connects: twice it is the history the
// throughput figures keep, and 100000d overflowed that.
func TestWeb_RefusesARefreshOverADay(t *testing.T) {
	t.Setenv("PGDRAIN_WEB_TOKEN", "")
	t.Setenv("PGDRAIN_WEB_BASIC_AUTH", "")
	for _, v := range []string{"1d1s", "100000d"} {
		code, stderr := runOffline(t, "web", "--refresh", v)
		if code != ExitUsage || !strings.Contains(stderr, "--refresh must be between 1s and 1d") {
			t.Errorf("--refresh %s: exit %d, stderr %q; want exit 2 naming --refresh and its range", v, code, stderr)
		}
	}
}
