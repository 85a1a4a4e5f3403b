package main

import (
	"math"
	"os"
	"strconv"
	"strings"
)

var nan = math.NaN()

// cpuTimes is the machine's CPU time so far, from /proc/stat (Linux): busy and total, in clock ticks
// summed over every core. ok is false where /proc/stat can not be read.
type cpuTimes struct {
	busy, total float64
	ok          bool
}

func readCPUTimes() cpuTimes {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	// user nice system idle iowait irq softirq steal ...: idle and iowait are the time no core worked.
	for i, f := range fields[1:] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return cpuTimes{}
		}
		if i >= 8 { // guest and guest_nice are already counted in user and nice
			break
		}
		t.total += v
		if i != 3 && i != 4 {
			t.busy += v
		}
	}
	t.ok = true
	return t
}

// busySince is the share of the machine's CPU time (every core) spent working since start:
// 1 is every core busy the whole time. NaN when it can not be read.
func (start cpuTimes) busySince(end cpuTimes) float64 {
	if !start.ok || !end.ok || end.total <= start.total {
		return nan
	}
	return (end.busy - start.busy) / (end.total - start.total)
}
