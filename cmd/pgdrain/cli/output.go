package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgdrain/pgdrain/internal/console/timetext"
)

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeTable writes a header and rows aligned in columns, each cell terminalSafe.
func writeTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(cells []string) {
		safe := make([]string, len(cells))
		for i, c := range cells {
			safe[i] = terminalSafe(c)
		}
		fmt.Fprintln(tw, strings.Join(safe, "\t"))
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
	return tw.Flush()
}

// terminalSafe writes the characters a terminal would act on as escapes (\x1b, \u202e): control
// characters (C0 with tab and newline, DEL, C1) and the bidirectional controls. A table's text
// comes from producers (keys, event types) and peers (last_error): an escape sequence in it could
// set the operator's window title, erase or overwrite the line, hide text or reorder it.
func terminalSafe(s string) string {
	if strings.IndexFunc(s, unsafeForTerminal) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !unsafeForTerminal(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

// terminalSafeLines is terminalSafe for a text of several lines (an error): its newlines stay.
func terminalSafeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = terminalSafe(l)
	}
	return strings.Join(lines, "\n")
}

func unsafeForTerminal(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0x061c || r == 0x200e || r == 0x200f ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// orDash prints NULLs as "-" in tables.
func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// timeOrDash writes a time for a table: RFC 3339 in UTC, to the second (timetext.Format).
func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return timetext.Format(*t)
}

// utc is t in UTC (nil stays nil): JSON fields then read 2026-03-01T12:00:05.123456Z whatever the
// local time zone, RFC 3339 in UTC as the tables, with the database's microseconds kept.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// humanDuration renders a duration for tables, rounded for a human.
func humanDuration(d *time.Duration) string {
	if d == nil {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func secondsOrNil(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	s := d.Seconds()
	return &s
}
