package escalation_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/escalation"
)

// telegramBot stands in for a real Telegram bot API client.
type telegramBot struct{}

func (telegramBot) SendMessage(ctx context.Context, chatID, text string) error { return nil }

// An engine delivering Telegram steps and webhooks until interrupted. Policies and ladders are
// made in SQL: SELECT alr.create_policy('db', '[{"delay":"0s","channel":"telegram","target":"@oncall"},
// {"delay":"5 minutes","channel":"webhook","target":"https://pager.example/hook"}]'), then
// SELECT alr.start_escalation(alr.add_alert('db down'), <policy id>).
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	engine, err := escalation.New(pool, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: telegramBot{}},
		"webhook":  escalation.WebhookNotifier{},
	}, escalation.Config{}) // batches of 100, 2-minute leases, 10s per delivery
	if err != nil {
		log.Fatal(err)
	}
	if err := engine.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
