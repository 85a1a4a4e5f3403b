package cli

import (
	"bytes"
	"context"
	"testing"
)

// An empty or blank --token (or $PGDRAIN_WEB_TOKEN of white space) is refused at start with a
// usage error, before any connection: it must never mean "no authentication" off loopback, nor a
// secret no header can carry.
func TestWeb_RefusesABlankToken(t *testing.T) {
	t.Setenv("PGDRAIN_WEB_BASIC_AUTH", "")
	for _, tc := range []struct {
		env  string
		args []string
	}{
		{"", []string{"--token", ""}},
		{"", []string{"--token", "   "}},
		{"", []string{"--token=\t"}},
		{"", []string{"--token", " s3cret"}},
		{"", []string{"--listen", "0.0.0.0:0", "--token", " "}},
		{"  ", nil},
	} {
		t.Setenv("PGDRAIN_WEB_TOKEN", tc.env)
		var out, errOut bytes.Buffer
		args := append([]string{"--dsn", "postgres://nobody@127.0.0.1:1/none", "web"}, tc.args...)
		code := Run(context.Background(), args, &out, &errOut)
		if code != ExitUsage || !bytes.Contains(errOut.Bytes(), []byte("--token (or $PGDRAIN_WEB_TOKEN) must not be empty, blank")) {
			t.Errorf("env %q args %q: exit %d, stderr %q; want exit 2 naming --token", tc.env, tc.args, code, errOut.String())
		}
	}
}

// --wedged-after 0s is refused at start: the console's zero is its default (1m), so it silently
// listed nothing younger than a minute while the page said "older than 1m".
func TestWeb_RefusesAZeroWedgedAfter(t *testing.T) {
	t.Setenv("PGDRAIN_WEB_TOKEN", "")
	t.Setenv("PGDRAIN_WEB_BASIC_AUTH", "")
	for _, v := range []string{"0s", "0"} {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), []string{"--dsn", "postgres://nobody@127.0.0.1:1/none", "web", "--wedged-after", v}, &out, &errOut)
		if code != ExitUsage || !bytes.Contains(errOut.Bytes(), []byte("--wedged-after must be more than 0s")) {
			t.Errorf("--wedged-after %s: exit %d, stderr %q; want exit 2 naming --wedged-after", v, code, errOut.String())
		}
	}
}
