package gocheck

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// blackholeProxy forwards TCP connections to a server until blackhole is called; from then on it
// behaves like a host that vanished without a reset (power loss, a partition): the connections it
// carried never move a byte again and are never closed, and connections made while the hole lasts
// are accepted but never answered. After heal, new connections are forwarded again (the database
// is reachable again, say at a new address); the old ones stay dead. Only a client-side bound
// gets a client out of them (the kernel would wait ~15 minutes).
type blackholeProxy struct {
	ln     net.Listener
	target string
	done   chan struct{}

	mu    sync.Mutex
	epoch int  // incremented by each blackhole; a pair forwards only in the epoch it was made
	holed bool // new connections are held, not forwarded
	conns []net.Conn
}

func startBlackholeProxy(t *testing.T, target string) *blackholeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &blackholeProxy{ln: ln, target: target, done: make(chan struct{})}
	go p.accept()
	t.Cleanup(func() {
		close(p.done)
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *blackholeProxy) addr() string { return p.ln.Addr().String() }

// blackhole stops forwarding: every current connection is dead from now on.
func (p *blackholeProxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch++
	p.holed = true
}

// heal forwards new connections again.
func (p *blackholeProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holed = false
}

func (p *blackholeProxy) alive(epoch int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return epoch == p.epoch
}

func (p *blackholeProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, client)
		holed, epoch := p.holed, p.epoch
		p.mu.Unlock()
		if holed {
			continue // accepted, never answered
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, server)
		p.mu.Unlock()
		go p.pipe(client, server, epoch)
		go p.pipe(server, client, epoch)
	}
}

// pipe copies from src to dst while the pair's epoch lasts; after that it swallows nothing more:
// it stops reading (the bytes stay in the kernel's buffers, unacknowledged by the peer process)
// and waits for the test's end, keeping both sockets open.
func (p *blackholeProxy) pipe(src, dst net.Conn, epoch int) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.alive(epoch) {
				<-p.done
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.alive(epoch) { // even an EOF: a vanished host sends nothing, not even a FIN
				<-p.done
				return
			}
			_ = dst.Close()
			return
		}
	}
}
