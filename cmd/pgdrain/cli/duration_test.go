package cli

import "testing"

// Ages print the way the flags take them: 7d, not 168h0m0s.
func TestAgeText_WritesAgesAsTheFlagsTakeThem(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"7d": "7d", "168h": "7d", "1d12h": "1d12h", "36h": "1d12h", "90m": "1h30m", "90s": "1m30s",
		"1h": "1h", "5m": "5m", "1.5s": "1.5s", "250ms": "250ms", "0s": "0s", "7d30s": "7d30s", "2d1h1m": "2d1h1m",
	} {
		var a ageFlag
		if err := a.Set(in); err != nil {
			t.Fatal(err)
		}
		if got := ageText(a.d); got != want {
			t.Errorf("ageText(%s) = %q, want %q", in, got, want)
		}
		var back ageFlag
		if err := back.Set(ageText(a.d)); err != nil || back.d != a.d {
			t.Errorf("%s: %q does not parse back to %s (%v)", in, ageText(a.d), a.d, err)
		}
	}
}
