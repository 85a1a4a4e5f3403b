package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
)

// producers writes events into demo.events the way an application does: each business
// transaction updates an account and inserts its events in the same transaction, so an event
// exists exactly when its business change committed.
//
// Each account belongs to one producer. Rows of one key are then inserted by one transaction after
// another, so their ids follow their commit order and the peer can check per-key order by id.
// (pgdrain also keeps commit order when several producers write one key at once, but then ids no
// longer tell that order.)
type producers struct {
	pool     *pgxpool.Pool
	count    int // producers
	keys     int
	events   int
	inserted atomic.Int64
	// transactions counts the committed business transactions.
	transactions atomic.Int64
	// malformedAt is the event (by its running number in producer 0) given a payload the peer
	// rejects permanently.
	malformedAt int64
}

func accountName(i int) string { return fmt.Sprintf("acct-%03d", i) }

// run inserts the events and returns when all are committed.
func (p *producers) run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, p.count)
	for w := range p.count {
		share := p.events / p.count
		if w == 0 {
			share += p.events % p.count
		}
		wg.Go(func() { errs[w] = p.produce(ctx, w, share) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *producers) produce(ctx context.Context, w, share int) error {
	rng := rand.New(rand.NewPCG(uint64(w), 42))
	var mine []string
	for i := w; i < p.keys; i += p.count {
		mine = append(mine, accountName(i))
	}
	written := 0
	for written < share {
		n := min(1+rng.IntN(3), share-written) // 1 to 3 events per business transaction
		account := mine[rng.IntN(len(mine))]
		types := make([]string, n)
		amounts := make([]string, n) // JSON values
		var total int64
		for i := range n {
			a := int64(rng.IntN(1000) + 1)
			total += a
			types[i] = "account.credited"
			amounts[i] = fmt.Sprint(a)
			if w == 0 && int64(written+i) == p.malformedAt {
				amounts[i] = `"twelve"` // a bug upstream: the peer will reject this one for good
			}
		}
		if err := p.transaction(ctx, account, total, types, amounts); err != nil {
			return err
		}
		written += n
		p.inserted.Add(int64(n))
		p.transactions.Add(1)
	}
	return nil
}

// transaction is one business transaction: the balance change and its events commit together.
func (p *producers) transaction(ctx context.Context, account string, total int64, types, amounts []string) error {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning a business transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var balance int64
	var version int
	err = tx.QueryRow(ctx, `UPDATE demo.accounts SET balance = balance + $2, version = version + $3
		WHERE account_id = $1 RETURNING balance, version`, account, total, len(types)).Scan(&balance, &version)
	if err != nil {
		return fmt.Errorf("updating %s: %w", account, err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO demo.events (event_type, payload, account_id)
		SELECT e.type, jsonb_build_object('account', $1::text, 'seq', $2::int - $3::int + e.i,
		                                  'amount', e.amount::jsonb, 'balance', $4::bigint), $1
		FROM unnest($5::text[], $6::text[]) WITH ORDINALITY AS e(type, amount, i)
		ORDER BY e.i`, account, version, len(types), balance, types, amounts)
	if err != nil {
		return fmt.Errorf("inserting events of %s: %w", account, err)
	}
	return tx.Commit(ctx)
}
