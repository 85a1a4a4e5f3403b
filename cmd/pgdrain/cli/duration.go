package cli

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// ageFlag is a flag.Value for ages like "90s", "5m", "7d" or "1d12h": Go durations plus a
// leading number of days, which retention settings are usually written in.
type ageFlag struct{ d time.Duration }

var daysPrefix = regexp.MustCompile(`^(\d+)d(.*)$`)

func (a *ageFlag) String() string { return a.d.String() }

func (a *ageFlag) Set(s string) error {
	d, err := parseAge(s)
	if err != nil {
		return err
	}
	a.d = d
	return nil
}

func parseAge(s string) (time.Duration, error) {
	var total time.Duration
	rest := s
	if m := daysPrefix.FindStringSubmatch(s); m != nil {
		days, err := strconv.Atoi(m[1])
		if err != nil || days > 100000 {
			return 0, fmt.Errorf("want a duration like 90s, 5m, 12h or 7d, got %q", s)
		}
		total = time.Duration(days) * 24 * time.Hour
		rest = m[2]
	}
	if rest != "" {
		d, err := time.ParseDuration(rest)
		if err != nil {
			return 0, fmt.Errorf("want a duration like 90s, 5m, 12h or 7d, got %q", s)
		}
		total += d
	}
	if rest == "" && total == 0 && s != "0d" {
		return 0, fmt.Errorf("want a duration like 90s, 5m, 12h or 7d, got %q", s)
	}
	if total < 0 {
		return 0, fmt.Errorf("must not be negative, got %q", s)
	}
	return total, nil
}
