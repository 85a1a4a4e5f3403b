package errtext

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestRecordable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"plain text is unchanged", "peer answered 400 Bad Request: nope", 256, "peer answered 400 Bad Request: nope"},
		{"valid multi-byte text is unchanged", "refusé: 日本語 😀", 256, "refusé: 日本語 😀"},
		{"a run of invalid bytes becomes one U+FFFD", "bad \xff\xfe body", 256, "bad \uFFFD body"},
		{"a lone continuation byte becomes U+FFFD", "bad \xa9 body", 256, "bad \uFFFD body"},
		{"every NUL byte becomes U+FFFD", "bad\x00request\x00", 256, "bad\uFFFDrequest\uFFFD"},
		{"a two-byte character across the limit is dropped whole", strings.Repeat("a", 255) + "é", 256, strings.Repeat("a", 255)},
		{"a four-byte character across the limit is dropped whole", "bbb😀", 5, "bbb"},
		{"a three-byte character ending at the limit is kept", "aa日x", 5, "aa日"},
		{"a character cut off before the input ends becomes U+FFFD when it fits", "ab\xe6\x97", 256, "ab\uFFFD"},
		{"a replacement that would cross the limit is dropped", "aaa\xff\xff", 4, "aaa"},
		{"a NUL whose replacement would cross the limit is dropped", "aaa\x00", 4, "aaa"},
		{"a long run of continuation bytes is cut and replaced", strings.Repeat("\x80", 10000), 4000, "\uFFFD"},
		{"a huge text is cut at a character boundary", strings.Repeat("日", 1_000_000), MaxBytes, strings.Repeat("日", 1333)},
		{"a limit of zero records nothing", "anything", 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := Recordable(c.in, c.max)
			require.Equal(t, c.want, got)
			requireRecordable(t, got, c.max)
		})
	}
}

// FuzzRecordable checks the guarantee on any input: valid UTF-8, no NUL, at most the limit, and
// unchanged when the input already was all that.
func FuzzRecordable(f *testing.F) {
	for _, s := range []string{"", "ok", "bad\x00request", strings.Repeat("a", 255) + "é", "\xff\xfe\xfd", "日本\xe6\x97", "😀\x00😀"} {
		f.Add(s, 256)
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		max = max % 1024
		if max < 0 {
			max = -max
		}
		got := Recordable(s, max)
		requireRecordable(t, got, max)
		if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
			require.True(t, strings.HasPrefix(s, got), "valid text is only cut: %q from %q", got, s)
			if len(s) <= max {
				require.Equal(t, s, got)
			} else {
				require.Greater(t, len(got), max-utf8.UTFMax, "cut no further than the character the limit splits")
			}
		}
	})
}

func requireRecordable(t *testing.T, s string, max int) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "valid UTF-8: %q", s)
	require.NotContains(t, s, "\x00")
	require.LessOrEqual(t, len(s), max)
}
