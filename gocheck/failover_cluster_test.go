package gocheck

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The failover check's clusters: a primary and a streaming standby made from it, both owned by the
// test (ownCluster), so it can stop the primary and promote the standby without disturbing the
// cluster the other tests share.

// primarySettings make a cluster a primary a standby can stream from, whose commits wait for that
// standby (synchronous_commit = on: flushed there) once synchronousStandby is named in
// synchronous_standby_names, so that every commit a client saw acknowledged survives the failover.
var primarySettings = []string{"wal_level=replica", "max_wal_senders=4", "max_replication_slots=4",
	"synchronous_commit=on", "wal_sender_timeout=10s"}

// synchronousStandby is the standby's cluster_name, which is the application_name its WAL receiver
// reports and synchronous_standby_names matches.
const synchronousStandby = "pgdrain_standby"

// startStandby makes a hot standby of primary with pg_basebackup -R (primary_conninfo and
// standby.signal; a physical replication slot keeps the WAL it needs) and starts it on another
// port. The standby's own settings leave synchronous_standby_names empty, so once promoted it
// commits without waiting for a standby it does not have.
func startStandby(t *testing.T, primary *ownCluster) *ownCluster {
	t.Helper()
	c := newOwnCluster(t, "pgdrain-standby-", "cluster_name="+synchronousStandby, "hot_standby=on",
		"synchronous_commit=on")
	out, err := c.command("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres",
		"-D", c.data, "-R", "-C", "-S", synchronousStandby, "-X", "stream", "-c", "fast").CombinedOutput()
	require.NoError(t, err, "pg_basebackup: %s", out)
	c.start()
	return c
}

// makeSynchronous names the standby in the primary's synchronous_standby_names (ALTER SYSTEM, after
// the base backup, so the standby does not inherit it) and waits until the primary reports it
// streaming as its synchronous standby.
func makeSynchronous(t *testing.T, primary *ownCluster) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, primary.postgresURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = %s`,
		pgx.Identifier{synchronousStandby}.Sanitize()))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	var state string
	require.Eventually(t, func() bool {
		_ = conn.QueryRow(ctx, `SELECT state || '/' || sync_state FROM pg_stat_replication WHERE application_name = $1`,
			synchronousStandby).Scan(&state)
		return state == "streaming/sync"
	}, time.Minute, 50*time.Millisecond, "the standby streams as the primary's synchronous standby (last seen %q)", state)
}

// promote ends the standby's recovery (pg_ctl promote -w: returns once it accepts writes).
func (c *ownCluster) promote() error {
	out, err := c.command("pg_ctl", "promote", "-D", c.data, "-w", "-t", "60").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl promote: %v: %s", err, out)
	}
	return nil
}

// multiHostDSN names both clusters in one libpq keyword DSN: a connection tries them in order and
// keeps the first that accepts writes (target_session_attrs=read-write), as a client of a
// Patroni-managed pair without a VIP would.
func multiHostDSN(user, database string, nodes ...*ownCluster) string {
	hosts, ports := "", ""
	for i, n := range nodes {
		if i > 0 {
			hosts += ","
			ports += ","
		}
		hosts += "127.0.0.1"
		ports += strconv.Itoa(n.port)
	}
	return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable target_session_attrs=read-write connect_timeout=5",
		hosts, ports, user, database)
}
