package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// queueStats is one outbox.stats row.
type queueStats struct {
	pending, ready, leased, backingOff, poisoned int64
}

func readStats(ctx context.Context, pool *pgxpool.Pool) (queueStats, error) {
	var s queueStats
	err := pool.QueryRow(ctx, `SELECT pending, ready, leased, backing_off, poisoned FROM outbox.stats($1)`, queueName).
		Scan(&s.pending, &s.ready, &s.leased, &s.backingOff, &s.poisoned)
	return s, err
}

// progress prints the live line: on a terminal one line rewritten with \r, otherwise a plain line
// every few seconds (logs and CI keep every line).
type progress struct {
	out    io.Writer
	tty    bool
	total  int
	start  time.Time
	window []sample
	last   time.Time
}

type sample struct {
	at   time.Time
	sent int
}

func newProgress(out *os.File, total int) *progress {
	fi, err := out.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0
	return &progress{out: out, tty: tty, total: total, start: time.Now()}
}

// plainEvery is how often a line is printed when stdout is not a terminal.
const plainEvery = 3 * time.Second

func (p *progress) update(sent int, s queueStats, inserted int64) {
	now := time.Now()
	p.window = append(p.window, sample{now, sent})
	for len(p.window) > 2 && now.Sub(p.window[0].at) > 3*time.Second {
		p.window = p.window[1:]
	}
	rate := 0.0
	if first := p.window[0]; now.Sub(first.at) > 0 {
		rate = float64(sent-first.sent) / now.Sub(first.at).Seconds()
	}
	eta := "-"
	left := p.total - sent - int(s.poisoned)
	if rate > 0 && left >= 0 {
		eta = (time.Duration(float64(left) / rate * float64(time.Second))).Round(time.Second).String()
	}
	line := fmt.Sprintf("%5.1fs  written %5d  sent %5d/%d  pending %5d  retrying %4d  poisoned %d  %6.0f ev/s  ETA %s",
		now.Sub(p.start).Seconds(), inserted, sent, p.total, s.pending, s.backingOff, s.poisoned, rate, eta)
	if p.tty {
		fmt.Fprintf(p.out, "\r%s\x1b[K", line)
		return
	}
	if now.Sub(p.last) >= plainEvery {
		p.last = now
		fmt.Fprintln(p.out, line)
	}
}

// done ends the live line.
func (p *progress) done() {
	if p.tty {
		fmt.Fprintln(p.out)
	}
}
