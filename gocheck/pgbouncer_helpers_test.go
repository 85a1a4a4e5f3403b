package gocheck

import (
	"fmt"
	"net"
	"net/url"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pgBouncerInstallHint is what a test says when pgbouncer is missing: make test runs
// scripts/ensure-deps.sh, which installs it on Debian, so a missing binary is a broken setup, not
// a reason to skip.
const pgBouncerInstallHint = "pgbouncer is not installed: run scripts/ensure-deps.sh " +
	"(Debian/Ubuntu: apt-get install pgbouncer; macOS: brew install pgbouncer)"

// pgBouncer is a PgBouncer process a test started in transaction pooling mode in front of the
// test server, with its own configuration in a temporary directory and a free port on 127.0.0.1.
type pgBouncer struct {
	port int
	log  *syncBuffer
}

// startPgBouncer starts pgbouncer in transaction pooling mode with poolSize server connections
// per (database, user) pair, in front of the server that serverURL points at, and stops it when
// the test ends. auth_type=trust (the test cluster trusts 127.0.0.1 too); PgBouncer 1.18 still
// wants every user name in its auth_file, so logins lists the roles the test will connect as.
func startPgBouncer(t *testing.T, serverURL string, poolSize int, logins ...string) *pgBouncer {
	t.Helper()
	bin, err := osexec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer" // Debian's package installs it outside a normal user's PATH
		if _, statErr := os.Stat(bin); statErr != nil {
			t.Fatal(pgBouncerInstallHint)
		}
	}
	server, err := url.Parse(serverURL)
	require.NoError(t, err)
	host, port := server.Hostname(), server.Port()
	if port == "" {
		port = "5432"
	}

	// pgbouncer refuses to run as root: as root it drops to the cluster's owner (make test's
	// scripts/with-postgres.sh creates "postgres"), so the directory must be readable by it.
	var asUser []string
	if os.Geteuid() == 0 {
		owner := "postgres"
		if _, err := user.Lookup(owner); err != nil {
			owner = "nobody"
		}
		asUser = []string{"-u", owner}
	}
	dir, err := os.MkdirTemp("", "pgdrain-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))

	var users strings.Builder
	for _, l := range logins {
		fmt.Fprintf(&users, "%q \"\"\n", l)
	}
	authFile := filepath.Join(dir, "users.txt")
	require.NoError(t, os.WriteFile(authFile, []byte(users.String()), 0o644))

	b := &pgBouncer{log: &syncBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", b.log.String())
		}
	})
	// A free port can be taken between closing the probe and pgbouncer's bind: try a few.
	for attempt := 0; ; attempt++ {
		b.port = freePort(t)
		ini := filepath.Join(dir, "pgbouncer.ini")
		require.NoError(t, os.WriteFile(ini, []byte(fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
pidfile =
logfile =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 200
server_reset_query =
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
`, host, port, b.port, authFile, poolSize)), 0o644))
		cmd := osexec.Command(bin, append(asUser, ini)...)
		cmd.Stdout, cmd.Stderr = b.log, b.log
		require.NoError(t, cmd.Start(), "starting %s", bin)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if err := b.waitListening(exited); err == nil {
			t.Cleanup(func() {
				_ = cmd.Process.Signal(os.Interrupt) // SIGINT: safe shutdown, closes every connection
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
			})
			return b
		} else if attempt == 4 {
			_ = cmd.Process.Kill()
			t.Fatalf("pgbouncer did not start: %v\n%s", err, b.log.String())
		}
		_ = cmd.Process.Kill()
	}
}

// waitListening waits until pgbouncer accepts connections, or fails when it exits first.
func (b *pgBouncer) waitListening(exited <-chan error) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("pgbouncer exited: %v", err)
		default:
		}
		c, err := net.DialTimeout("tcp", b.addr(), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("pgbouncer is not listening on %s after 10s", b.addr())
}

func (b *pgBouncer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// url returns direct (a URL of the test server: user, database, parameters) pointed at PgBouncer
// instead, with extra query parameters added (default_query_exec_mode, for one).
func (b *pgBouncer) url(t *testing.T, direct string, extra url.Values) string {
	t.Helper()
	u, err := url.Parse(direct)
	require.NoError(t, err)
	u.Host = b.addr()
	q := u.Query()
	for k, vs := range extra {
		q[k] = vs
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
