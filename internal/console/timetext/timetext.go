// Package timetext writes the times pgdrain shows people in one format: RFC 3339 in UTC, to the
// second (2026-03-01T12:00:05Z). The console and the CLI use it for every time they print, and
// rewrite to it the times PostgreSQL writes into texts (the reason of outbox.wedged_partitions,
// the detail of outbox.repair), which the server formats by the session's DateStyle and TimeZone.
package timetext

import (
	"regexp"
	"strconv"
	"time"
)

// Layout is the format of every time pgdrain writes for a person: RFC 3339, UTC ("Z"), seconds.
const Layout = "2006-01-02T15:04:05Z07:00"

// Format writes t in Layout, in UTC.
func Format(t time.Time) string { return t.UTC().Format(Layout) }

// pgTimestamp matches a timestamptz as PostgreSQL writes it with DateStyle ISO (the default):
// "2026-03-01 13:00:05.123456+01", also "+05:30", "+05:30:15", and the RFC 3339 forms.
var pgTimestamp = regexp.MustCompile(`\b(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}(?::?\d{2}(?::?\d{2})?)?)`)

// Rewrite returns s with every timestamp with a time zone offset in it written in Layout, in UTC
// (fractions of a second dropped, as Format does). Other text is left as it is.
func Rewrite(s string) string {
	return pgTimestamp.ReplaceAllStringFunc(s, func(m string) string { return Format(parse(m)) })
}

// First returns the first timestamp with a time zone offset in s (as Rewrite finds them), with its
// fraction of a second (the console's release button names the lease it ends by it), and whether
// there is one: "leased until 2026-03-01 12:00:05.25+00" gives that time.
func First(s string) (time.Time, bool) {
	m := pgTimestamp.FindString(s)
	if m == "" {
		return time.Time{}, false
	}
	return parse(m).UTC(), true
}

// parse reads one match of pgTimestamp, with its fraction of a second.
func parse(m string) time.Time {
	p := pgTimestamp.FindStringSubmatch(m)
	n := make([]int, 6)
	for i := range n {
		n[i], _ = strconv.Atoi(p[i+1])
	}
	offset := 0
	if z := p[8]; z != "Z" {
		digits := []byte{}
		for _, c := range []byte(z[1:]) {
			if c != ':' {
				digits = append(digits, c)
			}
		}
		for i, unit := range []int{3600, 60, 1} {
			if 2*i+2 <= len(digits) {
				v, _ := strconv.Atoi(string(digits[2*i : 2*i+2]))
				offset += v * unit
			}
		}
		if z[0] == '-' {
			offset = -offset
		}
	}
	nanos := 0
	if f := p[7]; f != "" { // ".123456": kept, so a time read back names the instant exactly
		digits := (f[1:] + "000000000")[:9]
		nanos, _ = strconv.Atoi(digits)
	}
	return time.Date(n[0], time.Month(n[1]), n[2], n[3], n[4], n[5], nanos, time.FixedZone("", offset))
}
