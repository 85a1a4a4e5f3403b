package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// What producers and peers wrote is printed with the characters a terminal acts on as escapes.
func TestTerminalSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcödé, 日本":           "plain text, ünïcödé, 日本",
		"\x1b]0;pwned\x07\x1b[2K\rall good": `\x1b]0;pwned\x07\x1b[2K\x0dall good`,
		"tab\tnew\nline\x7f":                `tab\x09new\x0aline\x7f`,
		"c1 \u009b31m":                      `c1 \x9b31m`,
		"bidi \u202egnp.exe \u2066x\u2069":  `bidi \u202egnp.exe \u2066x\u2069`,
	} {
		require.Equal(t, want, terminalSafe(in), "%q", in)
	}
	require.Equal(t, "line one\nline \\x1b[2K two", terminalSafeLines("line one\nline \x1b[2K two"))

	var b bytes.Buffer
	require.NoError(t, writeTable(&b, []string{"KEY", "LAST ERROR"}, [][]string{{"k\x1b[31m", "peer said\r\x1b[8mhidden"}}))
	require.NotContains(t, b.String(), "\x1b")
	require.NotContains(t, b.String(), "\r")
	require.Contains(t, b.String(), `peer said\x0d\x1b[8mhidden`)
}
