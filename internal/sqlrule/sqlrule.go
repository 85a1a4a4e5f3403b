// Package sqlrule holds the rules of pgdrain's SQL functions that Go code checks before it calls
// them, so that a caller's mistake is named before anything connects: one copy of each, beside the
// function whose rule it is.
package sqlrule

import (
	"regexp"
	"strings"
	"unicode"
)

// QueueName is the rule of outbox._queue_name: a plain "schema.table" (or "table"), letters,
// digits and _, each part at most 63 characters.
var QueueName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// Blank tells whether s shows nothing, as outbox._is_blank and alr._is_blank decide: empty, white
// space (Unicode's) or the invisible separators they also count (the Mongolian vowel separator,
// zero-width spaces and joiners, the word joiner, the byte order mark).
func Blank(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool {
		return !unicode.IsSpace(r) && !strings.ContainsRune("\u180e\u200b\u200c\u200d\u2060\ufeff", r)
	}) < 0
}

// WithinYears1To9999 is a SQL expression that reads the timestamptz expression expr within years
// 1 to 9999, the range Go's time.Time, RFC 3339 and encoding/json write: 'infinity', '-infinity'
// and a time near PostgreSQL's limits (which a producer may write into an event's created_at) read
// as the nearer bound, and NULL as year 1 (GREATEST passes NULL by); a caller that must tell NULL
// apart tests expr first.
func WithinYears1To9999(expr string) string {
	return "LEAST(GREATEST(" + expr + ", '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00')"
}
