package gocheck

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// TestRefresh_AProducersKeyShareGrantedBesideTheBatchsForUpdateKeepsItsRowsHead replays, with gdb,
// a PostgreSQL race that left a committed row with no head and no wake note, and later rows of its
// key were delivered first (bench/fifo/FINDINGS-s26.md: 4.3 s and 55 rows, lock mode).
// heap_lock_tuple's key-share path reads a row's xmax (here a lock-mode batch's FOR NO KEY UPDATE
// of the key's head, no conflict), lets go of the buffer lock, takes it again and checks only that
// the row was not updated meanwhile: a FOR UPDATE taken in between is not seen, and both locks are
// granted. The test stops the producer's backend in that window, lets the batch settle the key's
// last row (its refresh locks the empty head FOR UPDATE) and stops the batch at its deletion of the
// head; the producer then finds the head, leaves no note and commits, and the batch deletes the
// head. Before outbox 00056 the deleting statement had looked for the key's rows from a snapshot
// taken before the producer committed, and the key lost its head.
func TestRefresh_AProducersKeyShareGrantedBesideTheBatchsForUpdateKeepsItsRowsHead(t *testing.T) {
	t.Parallel()
	gdb := gdbPath(t)
	modeRegister := map[string]string{"amd64": "$rcx", "arm64": "$x3"}[runtime.GOARCH]
	require.NotEmpty(t, modeRegister, "no register for heap_lock_tuple's fourth argument on %s", runtime.GOARCH)
	ctx := context.Background()
	cluster := startOwnCluster(t)
	admin, err := pgx.Connect(ctx, cluster.postgresURL)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `CREATE DATABASE race`)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	url := testdb.WithDatabase(cluster.postgresURL, "race")
	require.NoError(t, testdb.MigrateUp(ctx, url))
	owner := connect(t, url)
	_, err = owner.Exec(ctx, `
		CREATE TABLE public.race (id bigserial PRIMARY KEY, event_type text NOT NULL DEFAULT 'e',
		  payload jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now(),
		  attempt_count int NOT NULL DEFAULT 0, next_attempt_at timestamptz, sent_at timestamptz,
		  leased_until timestamptz, lease_token uuid, last_error text, k text NOT NULL);
		SELECT outbox.create_queue('public.race', 'k');
		INSERT INTO public.race (k) VALUES ('a');`)
	require.NoError(t, err)

	// The batch claims row 1: it holds the head of 'a' FOR NO KEY UPDATE until it ends.
	batch, err := connect(t, url).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = batch.Rollback(ctx) }()
	require.Equal(t, []int64{1}, idsOf(t, batch, `SELECT id FROM outbox.claim_locked('public.race', 1)`))
	// The producer of row 2 of 'a'.
	producer, err := connect(t, url).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = producer.Rollback(ctx) }()
	require.Equal(t, int64(2), insertRaceRow(t, producer))

	// Its commit step's head probe stops between the buffer unlock and relock of key-share mode
	// (LockTupleKeyShare = 0; the second LockBuffer call after entry is the unlock).
	stoppedProducer := gdbStop(t, gdb, backendPid(t, producer),
		"break heap_lock_tuple if "+modeRegister+" == 0", "continue",
		"break LockBuffer", "ignore 2 2", "continue")
	committed := make(chan error, 1)
	go func() { committed <- producer.Commit(ctx) }()
	stoppedProducer.waitStopped()

	// The batch settles row 1: its refresh finds 'a' empty (row 2 is not committed), locks the head
	// FOR UPDATE and stops where it deletes it.
	stoppedBatch := gdbStop(t, gdb, backendPid(t, batch), "break heap_delete", "continue")
	settled := make(chan error, 1)
	go func() {
		_, err := batch.Exec(ctx, `SELECT outbox.settle_locked('public.race', '{1}', '{sent}')`)
		settled <- err
	}()
	stoppedBatch.waitStopped()

	// The producer's key-share lock is granted beside the batch's FOR UPDATE: it finds the head,
	// has nothing to write and commits.
	stoppedProducer.release()
	require.NoError(t, waitFor(t, committed, "the producer's COMMIT"))
	stoppedBatch.release()
	require.NoError(t, waitFor(t, settled, "the batch's settle_locked"))
	require.NoError(t, batch.Commit(ctx))

	require.Zero(t, wakeNotes(t, owner), "the producer held the head beside the batch's FOR UPDATE: no wake note "+
		"(a note means the race did not happen as replayed, and this test proves nothing)")
	var head, floor int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT head_id, floor_id FROM outbox.partition_heads WHERE partition_key = 'a'`).
		Scan(&head, &floor), "row 2 of 'a' is committed and pending: its key has a head")
	require.Equal(t, [2]int64{2, 2}, [2]int64{head, floor})
	require.Equal(t, int64(3), insertRaceRow(t, owner))
	next, err := owner.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = next.Rollback(ctx) }()
	require.Equal(t, []int64{2}, idsOf(t, next, `SELECT id FROM outbox.claim_locked('public.race', 8)`),
		"row 2 is delivered before row 3")
}

func insertRaceRow(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(context.Background(), `INSERT INTO public.race (k) VALUES ('a') RETURNING id`).Scan(&id))
	return id
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func backendPid(t *testing.T, tx pgx.Tx) int {
	t.Helper()
	var pid int
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid))
	return pid
}

func waitFor(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not return within 60 s", what)
		return nil
	}
}

// gdbPath finds gdb (scripts/ensure-deps.sh installs it).
func gdbPath(t *testing.T) string {
	t.Helper()
	path, err := osexec.LookPath("gdb")
	if err != nil {
		t.Fatal("gdb is missing: a test replays a PostgreSQL race by stopping backends with it. Install it " +
			"(Debian: apt-get install gdb; make test runs scripts/ensure-deps.sh, which does)")
	}
	return path
}

// gdbStopped is a server backend that gdb stops at a breakpoint until released.
type gdbStopped struct {
	t        *testing.T
	dir      string
	done     chan error
	output   *syncBuffer
	released bool
}

// gdbStop attaches gdb to the backend, runs the commands (breakpoints, continue) and, when the last
// one returns (the backend stopped), holds it there until release; then it deletes the breakpoints
// and detaches. It returns once the breakpoints are set.
func gdbStop(t *testing.T, gdb string, pid int, commands ...string) *gdbStopped {
	t.Helper()
	s := &gdbStopped{t: t, dir: t.TempDir(), done: make(chan error, 1), output: &syncBuffer{}}
	mark := func(name string) string { return "shell touch " + filepath.Join(s.dir, name) }
	args := []string{"-p", fmt.Sprint(pid), "-batch", "-nx", "-ex", "set pagination off"}
	for i, c := range commands {
		args = append(args, "-ex", c)
		if i == 0 {
			args = append(args, "-ex", mark("armed"))
		}
	}
	args = append(args, "-ex", mark("stopped")+fmt.Sprintf("; while [ ! -e %s ]; do sleep 0.05; done", filepath.Join(s.dir, "go")),
		"-ex", "delete", "-ex", "detach")
	cmd := osexec.Command(gdb, args...)
	cmd.Stdout, cmd.Stderr = s.output, s.output
	require.NoError(t, cmd.Start())
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if !s.released {
			s.release()
		}
	})
	s.waitFile("armed", "gdb to attach and set its breakpoint (as root, or with kernel.yama.ptrace_scope = 0)")
	return s
}

func (s *gdbStopped) waitStopped() {
	s.t.Helper()
	s.waitFile("stopped", "the backend to reach the breakpoint")
}

func (s *gdbStopped) release() {
	s.released = true
	_ = os.WriteFile(filepath.Join(s.dir, "go"), nil, 0o644)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.t.Errorf("gdb did not detach within 30 s: %s", s.output)
	}
}

func (s *gdbStopped) waitFile(name, what string) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(s.dir, name)); err == nil {
			return
		}
		select {
		case err := <-s.done:
			s.t.Fatalf("gdb ended (%v) before %s: %s", err, what, s.output)
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.t.Fatalf("waited 60 s for %s: %s", what, s.output)
}
