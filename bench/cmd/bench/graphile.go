package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgdrain/pgdrain/bench/internal/cpustat"
)

// Graphile Worker (Node.js) as a peer in section 3: bench/graphile/drain.mjs drains o.events
// pre-inserted no-op jobs in a fresh database on the same server. The Node side needs node and
// npm on PATH; without them, or when npm cannot install the pinned package, the section prints a
// row saying the peer was skipped and why instead of failing the bench.

// graphileResult is the JSON line drain.mjs prints.
type graphileResult struct {
	// CPUPerEvent is the machine's CPU per job over the drain (µs, every core; set by graphileOnce).
	CPUPerEvent float64 `json:"-"`
	Jobs        int     `json:"jobs"`
	Seconds     float64 `json:"seconds"`
	Executed    int     `json:"executed"`
	Version     string  `json:"version"`
	Settings    string  `json:"settings"`
}

// graphileDir finds bench/graphile from the working directory (scripts/bench.sh runs in bench/).
func graphileDir() (string, error) {
	for _, d := range []string{"graphile", filepath.Join("bench", "graphile")} {
		if _, err := os.Stat(filepath.Join(d, "drain.mjs")); err == nil {
			return filepath.Abs(d)
		}
	}
	return "", errors.New("bench/graphile/drain.mjs not found from the working directory")
}

// graphileSetup checks for node and npm and installs the pinned packages once.
func graphileSetup(ctx context.Context) (string, error) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s not on PATH", tool)
		}
	}
	dir, err := graphileDir()
	if err != nil {
		return "", err
	}
	args := []string{"install", "--silent", "--no-audit", "--no-fund"}
	if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); err == nil {
		args = []string{"ci", "--silent", "--no-audit", "--no-fund"}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm %s failed: %v: %s", args[0], err, lastLine(out))
	}
	return dir, nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// graphileOnce fills the jobs table with n jobs and drains it with procs worker processes started
// together; the time is the slowest process's, from its worker start until it saw no job left.
func graphileOnce(ctx context.Context, dir, dsn string, procs, n int) (float64, graphileResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	env := append(os.Environ(), "DATABASE_URL="+dsn, fmt.Sprintf("JOBS=%d", n))
	prep := exec.CommandContext(ctx, "node", "drain.mjs", "prepare")
	prep.Dir, prep.Env = dir, env
	if out, err := prep.CombinedOutput(); err != nil {
		return 0, graphileResult{}, fmt.Errorf("drain.mjs prepare: %v: %s", err, lastLine(out))
	}
	if err := settleGraphileFill(ctx, dsn); err != nil {
		return 0, graphileResult{}, err
	}

	type worker struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout *bufio.Scanner
		stderr bytes.Buffer
	}
	workers := make([]*worker, procs)
	defer func() {
		for _, w := range workers {
			if w != nil && w.cmd.Process != nil && w.cmd.ProcessState == nil {
				_ = w.cmd.Process.Kill()
				_ = w.cmd.Wait()
			}
		}
	}()
	fail := func(w *worker, what string, err error) error {
		if err == nil {
			err = errors.New("no output")
		}
		return fmt.Errorf("drain.mjs work: %s: %v: %s", what, err, lastLine(w.stderr.Bytes()))
	}
	for i := range workers {
		w := &worker{cmd: exec.CommandContext(ctx, "node", "drain.mjs", "work")}
		w.cmd.Dir, w.cmd.Env, w.cmd.Stderr = dir, env, &w.stderr
		var err error
		if w.stdin, err = w.cmd.StdinPipe(); err != nil {
			return 0, graphileResult{}, err
		}
		out, err := w.cmd.StdoutPipe()
		if err != nil {
			return 0, graphileResult{}, err
		}
		w.stdout = bufio.NewScanner(out)
		if err := w.cmd.Start(); err != nil {
			return 0, graphileResult{}, err
		}
		workers[i] = w
	}
	for _, w := range workers {
		if !w.stdout.Scan() || w.stdout.Text() != "ready" {
			return 0, graphileResult{}, fail(w, "waiting for ready", w.stdout.Err())
		}
	}
	span := cpustat.Start()
	for _, w := range workers {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return 0, graphileResult{}, fail(w, "starting", err)
		}
	}
	var slowest float64
	var res graphileResult
	executed := 0
	results := make([]graphileResult, len(workers))
	for i, w := range workers {
		if !w.stdout.Scan() {
			return 0, graphileResult{}, fail(w, "reading result", w.stdout.Err())
		}
		if err := json.Unmarshal(w.stdout.Bytes(), &results[i]); err != nil {
			return 0, graphileResult{}, fail(w, "parsing "+w.stdout.Text(), err)
		}
	}
	cpu := span.PerEvent(n)
	for i, w := range workers {
		r := results[i]
		if err := w.cmd.Wait(); err != nil {
			return 0, graphileResult{}, fail(w, "exit", err)
		}
		slowest, res, executed = max(slowest, r.Seconds), r, executed+r.Executed
	}
	if executed < n {
		return 0, graphileResult{}, fmt.Errorf("graphile worker ran %d of %d jobs", executed, n)
	}
	res.CPUPerEvent = cpu
	return float64(n) / slowest, res, nil
}

// benchGraphile emits the Graphile Worker rows of the peers table.
func benchGraphile(ctx context.Context, o options, emit func(string)) {
	const label = "Graphile Worker"
	dir, err := graphileSetup(ctx)
	if err != nil {
		emit(fmt.Sprintf("| %s | skipped: %s | – | – |\n", label, mdCell(err.Error())))
		return
	}
	pool, err := freshDatabase(ctx, o.server, "bench_graphile", false, 1)
	if err != nil {
		emit(fmt.Sprintf("| %s | skipped: creating its database: %s | – | – |\n", label, mdCell(err.Error())))
		return
	}
	pool.Close()
	dsn := withDatabase(o.server, "bench_graphile")
	for _, procs := range []int{1, 2} {
		var rates, cpus []float64
		var last graphileResult
		for range o.runs {
			r, res, err := graphileOnce(ctx, dir, dsn, procs, o.events)
			if err != nil {
				emit(fmt.Sprintf("| %s | %d process(es): failed: %s | – | – |\n", label, procs, mdCell(err.Error())))
				return
			}
			rates, cpus, last = append(rates, r), append(cpus, res.CPUPerEvent), res
		}
		proc := "1 process: "
		if procs > 1 {
			proc = fmt.Sprintf("%d processes started together, each: ", procs)
		}
		emit(fmt.Sprintf("| %s %s, no-op task | %s%s, jobs pre-inserted with one add_jobs call | %s | %s |\n",
			label, last.Version, proc, last.Settings, summarize(rates).format("%.0f"), summarize(cpus).format("%.0f")))
	}
}

// mdCell keeps an error message on one table row.
func mdCell(s string) string {
	return strings.NewReplacer("|", "/", "\n", " ").Replace(s)
}

// settleGraphileFill ends Graphile Worker's fill as the other fills end (settleFill).
func settleGraphileFill(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, settleFill)
	return err
}
