package timetext

import (
	"testing"
	"time"
)

func TestFormat_IsRFC3339InUTCToTheSecond(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 13, 0, 5, 123456000, time.FixedZone("CET", 3600))
	if got, want := Format(at), "2026-03-01T12:00:05Z"; got != want {
		t.Fatalf("Format = %q, want %q", got, want)
	}
	if _, err := time.Parse(time.RFC3339, Format(at)); err != nil {
		t.Fatalf("not RFC 3339: %v", err)
	}
}

func TestRewrite_WritesPostgreSQLTimesInOneFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"leased until 2026-03-01 12:00:05.123456+00":                                         "leased until 2026-03-01T12:00:05Z",
		"backing off until 2026-03-01 13:00:05+01 after 2 attempts":                          "backing off until 2026-03-01T12:00:05Z after 2 attempts",
		"head parked until 2026-03-01 17:30:05.5+05:30, row 7 due at 2026-03-01 12:00:05-02": "head parked until 2026-03-01T12:00:05Z, row 7 due at 2026-03-01T14:00:05Z",
		"until 2026-03-01T12:00:05Z":                                                         "until 2026-03-01T12:00:05Z",
		"until 2026-03-01T12:00:05.999+00:00":                                                "until 2026-03-01T12:00:05Z",
		"until 2026-03-01 00:30:00-00:30:15":                                                 "until 2026-03-01T01:00:15Z",
		"leased until infinity":                                                              "leased until infinity",
		"ready, waiting for a drainer":                                                       "ready, waiting for a drainer",
		"row 2026 of key 2026-03-01 (no time)":                                               "row 2026 of key 2026-03-01 (no time)",
	} {
		if got := Rewrite(in); got != want {
			t.Errorf("Rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFirst_ReadsTheFirstTimeOfAText(t *testing.T) {
	t.Parallel()
	at, ok := First("leased until 2026-03-01 13:00:05.5+01 after 2 attempts, then 2026-03-02 00:00:00+00")
	if !ok || !at.Equal(time.Date(2026, 3, 1, 12, 0, 5, 500_000_000, time.UTC)) || at.Location() != time.UTC {
		t.Fatalf("First = %v, %v", at, ok)
	}
	if _, ok := First("ready, waiting for a drainer"); ok {
		t.Fatal("First found a time in a text without one")
	}
}
