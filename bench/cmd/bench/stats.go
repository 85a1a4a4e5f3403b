package main

import (
	"fmt"
	"slices"
)

// summary is the median of a set of runs with its range.
type summary struct{ median, min, max float64 }

func summarize(vals []float64) summary {
	s := slices.Clone(vals)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return summary{median: med, min: s[0], max: s[n-1]}
}

// format renders the summary with the given verb, e.g. "%.0f" → "1234 (1200–1300)".
func (s summary) format(verb string) string {
	return fmt.Sprintf(verb+" ("+verb+"–"+verb+")", s.median, s.min, s.max)
}
