// Package errtext makes error texts recordable: whatever an Applier, a sink or a peer put in an
// error, the text pgdrain writes to the database (the outbox's last_error, the escalation
// journal's error) must be accepted by PostgreSQL, or the whole call that records it fails with
// it, taking every other result of the call along (SQLSTATE 22021 for an invalid byte sequence or
// a NUL byte).
package errtext

import (
	"strings"
	"unicode/utf8"
)

// MaxBytes is the longest error text pgdrain records, in bytes.
const MaxBytes = 4000

// LogBytes is the longest error text of one log line, in bytes: a line is read by people and
// shipped by log agents, which often cut or drop long lines.
const LogBytes = 1000

// replacement stands in for every byte PostgreSQL refuses in a text value.
const replacement = "\uFFFD"

// Recordable returns s as a PostgreSQL text value always accepts it: valid UTF-8 (each run of
// invalid bytes becomes U+FFFD), no NUL byte (each becomes U+FFFD), and at most maxBytes bytes,
// cut at a rune boundary. Text that is already so, and short enough, is returned unchanged.
func Recordable(s string, maxBytes int) string {
	// Cutting first bounds the work on a huge text; the cut backs off to the start of a character
	// the limit splits, so a character is dropped whole, not replaced.
	s = cut(s, maxBytes)
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	s = strings.ReplaceAll(strings.ToValidUTF8(s, replacement), "\x00", replacement)
	return cut(s, maxBytes) // a replacement is 3 bytes: it may have grown the text
}

// cut returns at most n bytes of s, ending before a character that byte n would split (for valid
// UTF-8; in invalid bytes it backs off at most utf8.UTFMax-1 bytes).
func cut(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for back := 0; back < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); back++ {
		n--
	}
	return s[:n]
}
