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
