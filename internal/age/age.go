// Package age parses the ages operators write for retention and staleness: Go durations plus a
// leading number of days ("90s", "5m", "7d", "1d12h"). The CLI's flags and the console's forms
// share it so that both accept exactly the same text.
package age

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

var daysPrefix = regexp.MustCompile(`^(\d+)d(.*)$`)

// Parse returns the duration s names, or an error quoting s.
func Parse(s string) (time.Duration, error) {
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
