// Package headsrebuild asks outbox.heads_rebuild (migration 00051) whether claims are rebuilding a
// partitioned queue's partition heads after a crash, a standby's promotion or a restore without the
// unlogged tables' data, one part of the keys per claim, in key order. Until the last part, keys
// no part has reached wait for theirs, outbox.repair checks nothing and outbox.wedged_partitions
// does not list them: the drainer's gauge, pgdrain check, stats and wedged, the console and the
// relay's /healthz all say so through Read.
package headsrebuild

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs one query: a *pgx.Conn, a *pgxpool.Pool or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Progress is how far claims are in a rebuild.
type Progress struct {
	// Through is the last key a part has done, nil before the first part.
	Through *string
}

// String says it in words: "no part done yet" or `done through key "k"`.
func (p Progress) String() string {
	if p.Through == nil {
		return "no part done yet"
	}
	return "done through key " + strconv.Quote(*p.Through)
}

// Read returns the rebuild's progress, nil when claims are not rebuilding the queue's heads (an
// unpartitioned queue never is). known is false when this database can not say: a schema before
// 00051, which has no outbox.heads_rebuild (42883), and a hot standby, which can not read the
// unlogged tables behind it (0A000: the primary's claims rebuild them, unseen there).
func Read(ctx context.Context, q Querier, queue string) (p *Progress, known bool, err error) {
	var rebuilding bool
	var through *string
	err = q.QueryRow(ctx, `SELECT r.rebuilding, r.rebuilt_through FROM outbox.heads_rebuild($1) r`, queue).
		Scan(&rebuilding, &through)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "0A000") {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if !rebuilding {
		return nil, true, nil
	}
	return &Progress{Through: through}, true, nil
}
