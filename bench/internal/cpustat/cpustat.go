// Package cpustat reads the machine's CPU time from /proc/stat (Linux), for benchmarks that report
// how busy the whole machine was while they ran.
package cpustat

import (
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Times is CPU time in clock ticks summed over every core: Busy of Total. OK is false where it could
// not be read (not Linux), and then every result derived from it is unknown.
type Times struct {
	Busy, Total float64
	OK          bool
}

// Read is the CPU time so far.
func Read() Times {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Times{}
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return Times{}
	}
	var t Times
	// user nice system idle iowait irq softirq steal ...: idle and iowait are the time no core worked.
	for i, f := range fields[1:] {
		if i >= 8 { // guest and guest_nice are already counted in user and nice
			break
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return Times{}
		}
		t.Total += v
		if i != 3 && i != 4 {
			t.Busy += v
		}
	}
	t.OK = true
	return t
}

// Sub is the CPU time spent from start to t.
func (t Times) Sub(start Times) Times {
	if !t.OK || !start.OK {
		return Times{}
	}
	return Times{Busy: t.Busy - start.Busy, Total: t.Total - start.Total, OK: true}
}

// Plus is the CPU time of two spans together.
func (t Times) Plus(u Times) Times {
	if !t.OK || !u.OK {
		return Times{}
	}
	return Times{Busy: t.Busy + u.Busy, Total: t.Total + u.Total, OK: true}
}

// BusyShare is the share of the span's CPU time spent working: 1 is every core busy the whole
// time. NaN when unknown or empty.
func (t Times) BusyShare() float64 {
	if !t.OK || t.Total <= 0 {
		return math.NaN()
	}
	return t.Busy / t.Total
}

// Span is the machine's CPU time over a timed span: Start it where the timed work starts.
type Span struct {
	start Times
	at    time.Time
}

// Start begins a span now.
func Start() Span { return Span{start: Read(), at: time.Now()} }

// PerEvent is the CPU time, in µs summed over every core, the whole machine spent per event of n
// since the span started (NaN when unknown): what an event cost everything that ran, client and
// server alike.
func (s Span) PerEvent(n int) float64 {
	spent := Read().Sub(s.start)
	share := spent.BusyShare()
	if math.IsNaN(share) || n <= 0 {
		return math.NaN()
	}
	return share * float64(runtime.NumCPU()) * time.Since(s.at).Seconds() * 1e6 / float64(n)
}
