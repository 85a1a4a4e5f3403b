package escalation

import "context"

// Notifier delivers one escalation step to a person. It must honour ctx (the engine's per-step
// timeout); an error is journaled as a failed delivery and not retried — the step was already
// recorded, and the ladder's next step is the retry.
//
// The engine calls Notify on a goroutine of its own and reads the error's text there, so a
// Notifier that misbehaves costs only its step, journaled as a failed delivery that says what
// happened: a panic (also one in the error's Error, such as a nil pointer returned as an error),
// or runtime.Goexit (t.FailNow in a test). One that ignores ctx is given up on OverrunGrace after
// StepTimeout and left running: its step is journaled as failed with its outcome unknown (at most
// one delivery per step: it is not delivered again), the engine goes on with the rest of the batch,
// and Health is not OK until the call returns (Health.Overrunning); its late outcome is only logged.
type Notifier interface {
	Notify(ctx context.Context, s Step) error
}

// NotifierFunc adapts a function to Notifier.
type NotifierFunc func(ctx context.Context, s Step) error

// Notify calls f.
func (f NotifierFunc) Notify(ctx context.Context, s Step) error { return f(ctx, s) }

// TelegramSender sends a text to a Telegram chat (a bot API client, or an in-memory fake in tests).
type TelegramSender interface {
	SendMessage(ctx context.Context, chatID, text string) error
}

// TelegramNotifier delivers a step as a Telegram message to the step's target chat.
type TelegramNotifier struct {
	// Sender talks to Telegram.
	Sender TelegramSender
}

// Notify sends the step's message to the chat named by its target.
func (n TelegramNotifier) Notify(ctx context.Context, s Step) error {
	return n.Sender.SendMessage(ctx, s.Target, s.Message())
}

// MailSender sends one e-mail (an SMTP client, or an in-memory fake in tests).
type MailSender interface {
	SendMail(ctx context.Context, to, subject, body string) error
}

// EmailNotifier delivers a step as an e-mail to the step's target address.
type EmailNotifier struct {
	// Sender talks to the mail server.
	Sender MailSender
}

// Notify mails the step's message to the address named by its target.
func (n EmailNotifier) Notify(ctx context.Context, s Step) error {
	return n.Sender.SendMail(ctx, s.Target, s.Message(), s.Message()+"\nidempotency key: "+s.IdempotencyKey())
}
