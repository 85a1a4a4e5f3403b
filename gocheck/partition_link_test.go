package gocheck

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// cutKind is how a partitionLink fails.
type cutKind int

const (
	// cutStall is a partition that heals: nothing moves while it lasts, nothing is closed, and when
	// it heals everything written meanwhile is delivered, late, in order (what TCP retransmission
	// does for a partition shorter than its timeout). A connection an end closed meanwhile is
	// closed after its data is delivered, as the kernel does with a FIN queued behind unacked data:
	// the server runs a query the client gave up on. Connections opened meanwhile are made when it
	// heals (a SYN retransmitted).
	cutStall cutKind = iota
	// cutBlackhole is a host that vanished without a reset (power loss, a NAT that lost its state):
	// the connections of the moment never carry another byte and are never closed, even after
	// heal. Connections opened while it lasts are made when it heals (the database is reachable
	// again, at the same or a new address).
	cutBlackhole
	// cutReset is a path that answers with resets (a firewall rejecting with tcp-reset, a load
	// balancer or NAT that dropped the flow): both ends of every connection get an RST at once,
	// and connections opened while it lasts are reset as soon as they are accepted.
	cutReset
)

func (k cutKind) String() string {
	return [...]string{"stall", "blackhole", "reset"}[k]
}

// partitionLink is a TCP proxy in the test process between some clients and a server that the
// test can cut (cutStall, cutBlackhole, cutReset) and heal: a network partition between those
// clients and the server, portable (no network namespace, no firewall, no root) and confined to the
// clients that dial it. What it cannot model: the server's TCP keepalive probes and
// tcp_user_timeout are answered by this process's kernel, so they never notice a partition here
// (see docs/failover.md for what does).
type partitionLink struct {
	ln     net.Listener
	target string
	done   chan struct{}

	mu    sync.Mutex
	moved *sync.Cond // broadcast on cut, heal and close
	cut   bool
	kind  cutKind
	epoch int // incremented by a blackhole: a pair of an older epoch never moves a byte again
	pairs map[*linkPair]struct{}
}

type linkPair struct {
	client, server net.Conn
	epoch          int
}

func startPartitionLink(t *testing.T, target string) *partitionLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &partitionLink{ln: ln, target: target, done: make(chan struct{}), pairs: map[*linkPair]struct{}{}}
	l.moved = sync.NewCond(&l.mu)
	go l.accept()
	t.Cleanup(l.close)
	return l
}

func (l *partitionLink) addr() string { return l.ln.Addr().String() }

// partition cuts the link the given way.
func (l *partitionLink) partition(kind cutKind) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut, l.kind = true, kind
	switch kind {
	case cutBlackhole:
		l.epoch++
	case cutReset:
		for p := range l.pairs {
			p.reset()
			delete(l.pairs, p)
		}
	}
	l.moved.Broadcast()
}

// heal restores the link: stalled connections deliver what waits, new connections are made.
func (l *partitionLink) heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = false
	l.moved.Broadcast()
}

func (l *partitionLink) close() {
	l.mu.Lock()
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	_ = l.ln.Close()
	for p := range l.pairs {
		_ = p.client.Close()
		if p.server != nil {
			_ = p.server.Close()
		}
	}
	l.moved.Broadcast()
	l.mu.Unlock()
}

// pass waits until bytes of p may move: it returns false when they never will (p's connections
// were blackholed or reset, or the test is over).
func (l *partitionLink) pass(p *linkPair) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		select {
		case <-l.done:
			return false
		default:
		}
		if _, ok := l.pairs[p]; !ok || p.epoch != l.epoch {
			return false
		}
		if !l.cut {
			return true
		}
		l.moved.Wait()
	}
}

func (l *partitionLink) accept() {
	for {
		client, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.cut && l.kind == cutReset {
			l.mu.Unlock()
			resetConn(client)
			continue
		}
		p := &linkPair{client: client, epoch: l.epoch}
		l.pairs[p] = struct{}{}
		l.mu.Unlock()
		go l.connect(p)
	}
}

// connect dials the server for p once the link lets it, then forwards both ways.
func (l *partitionLink) connect(p *linkPair) {
	if !l.pass(p) {
		l.hold()
		return
	}
	server, err := net.Dial("tcp", l.target)
	if err != nil {
		_ = p.client.Close()
		return
	}
	l.mu.Lock()
	if _, ok := l.pairs[p]; !ok { // reset meanwhile
		l.mu.Unlock()
		resetConn(server)
		return
	}
	p.server = server
	l.mu.Unlock()
	go l.pipe(p, p.client, server)
	go l.pipe(p, server, p.client)
}

// pipe copies src to dst while the link lets it; an EOF is passed on as a half-close, like a FIN
// behind the data.
func (l *partitionLink) pipe(p *linkPair, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !l.pass(p) {
				l.hold()
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			if !l.pass(p) {
				l.hold()
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			} else {
				_ = dst.Close()
			}
			return
		}
	}
}

// hold parks a pipe that will never move a byte again until the test ends, keeping its sockets
// open and silent (a blackhole; reset sockets are closed already).
func (l *partitionLink) hold() { <-l.done }

func (p *linkPair) reset() {
	resetConn(p.client)
	if p.server != nil {
		resetConn(p.server)
	}
}

// resetConn closes c with an RST (SO_LINGER 0) instead of a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
