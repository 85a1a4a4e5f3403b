package cli

import (
	"strconv"
	"strings"
	"time"

	"github.com/pgdrain/pgdrain/internal/age"
)

// ageFlag is a flag.Value for ages like "90s", "5m", "7d" or "1d12h": Go durations plus a
// leading number of days, which retention settings are usually written in (internal/age).
type ageFlag struct{ d time.Duration }

func (a *ageFlag) String() string { return ageText(a.d) }

func (a *ageFlag) Set(s string) error {
	d, err := age.Parse(s)
	if err != nil {
		return err
	}
	a.d = d
	return nil
}

// ageText writes an age the way the flags take it, exactly and without zero units: 7d, 1d12h,
// 1h30m, 90s is 1m30s, 0s. age.Parse(ageText(d)) == d.
func ageText(d time.Duration) string {
	if d <= 0 {
		return d.String()
	}
	days := d / (24 * time.Hour)
	rest := d % (24 * time.Hour)
	var s string
	if rest > 0 {
		s = rest.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
	}
	if days > 0 {
		return strconv.FormatInt(int64(days), 10) + "d" + s
	}
	return s
}
