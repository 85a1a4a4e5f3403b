package console

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A browser opens connections it may never send a request on (a speculative preconnect), and
// net/http counts such a connection as active until it is five seconds old, longer than Run's
// grace. Told to stop, Run still returns nil: it closes what is left (pgdrain web exited 3 when
// Chromium had just opened one).
func TestRun_StopsCleanlyBesideAConnectionThatSentNothing(t *testing.T) {
	s := newTestServer(t, Config{ReadOnly: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context ending")
	}
}
