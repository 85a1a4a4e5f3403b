package gocheck

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// syncBuilder is a strings.Builder safe to read while cli.Run writes to it.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The relay exits as docs/relay.md says (issue 31 item 7): 2 for a bad file, with every problem and
// no pointer to the usage text; 3 when it stops on an error once running (a queue that is not
// registered), in the relay's words, not those of the SQL function that refused; and 0 when told
// to stop (SIGTERM) while it still waits for a database that is unreachable at start, which it
// waits for rather than failing.
func TestRelayCLI_ExitsAsDocumented(t *testing.T) {
	t.Parallel()
	sink := fmt.Sprintf("    sink:\n      webhook: {url: http://127.0.0.1:9/hook, secrets: [%s]}\n", rlSecret)

	bad := rlWriteConfig(t, "queues:\n  - queue: public.events\n    timeout: 3\n"+sink)
	r := runCLI(t, "relay", "--config", bad)
	require.Equal(t, cli.ExitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, bad+":3: queues[0].timeout")
	require.NotContains(t, r.stderr, "pgdrain help: usage", "a file's problems do not point at the usage text")

	db := testdb.New(t)
	unregistered := rlWriteConfig(t, fmt.Sprintf("dsn: %s\nlog: {level: error}\nqueues:\n  - queue: public.nope\n%s",
		loginURL(t, db, "pgdrain_worker"), sink))
	r = runCLI(t, "relay", "--config", unregistered)
	require.Equal(t, cli.ExitDatabase, r.code, r.stderr)
	require.Contains(t, r.stderr, "pgdrain: relay: queue public.nope: queue public.nope is not registered (call outbox.create_queue first)")
	require.NotContains(t, r.stderr, "queue_info", "the relay's words, not the SQL function's")
	require.NotContains(t, r.stderr, "pgdrain help: usage")

	unreachable := rlWriteConfig(t, "dsn: postgres://nobody@127.0.0.1:1/none?connect_timeout=1\nlog: {level: warn, format: text}\nqueues:\n  - queue: public.events\n"+sink)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuilder
	done := make(chan int, 1)
	go func() { done <- cli.Run(ctx, []string{"relay", "--config", unreachable}, &out, &errOut) }()
	drWaitFor(t, 30*time.Second, "the relay waits for the database", func() bool {
		return strings.Contains(errOut.String(), "starting failed; retrying (database unavailable)")
	})
	cancel() // SIGTERM
	select {
	case c := <-done:
		require.Equal(t, cli.ExitOK, c, errOut.String())
		require.NotContains(t, errOut.String(), "relay of the queue failed", "stopping while waiting is no failure")
	case <-time.After(30 * time.Second):
		t.Fatal("pgdrain relay did not stop within 30s of its context ending")
	}
}
