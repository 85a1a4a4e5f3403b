package cli

import (
	"time"

	"github.com/pgdrain/pgdrain/internal/age"
)

// ageFlag is a flag.Value for ages like "90s", "5m", "7d" or "1d12h": Go durations plus a
// leading number of days, which retention settings are usually written in (internal/age).
type ageFlag struct{ d time.Duration }

func (a *ageFlag) String() string { return a.d.String() }

func (a *ageFlag) Set(s string) error {
	d, err := age.Parse(s)
	if err != nil {
		return err
	}
	a.d = d
	return nil
}
