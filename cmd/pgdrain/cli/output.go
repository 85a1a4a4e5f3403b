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

// writeTable writes a header and rows aligned in columns.
func writeTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
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
