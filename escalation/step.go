package escalation

import (
	"fmt"
	"time"
)

// Step is one due escalation step taken by an engine: who to reach (Channel, Target) for which
// alert, and the lease (LeaseToken, LeasedUntil) under which it was taken.
type Step struct {
	// EscalationID is the ladder (alr.alert_escalations.id).
	EscalationID string
	// AlertID is the alert the ladder escalates.
	AlertID string
	// AlertName is the alert's name, for messages.
	AlertName string
	// StepIdx is the step's index in its policy, from 0.
	StepIdx int
	// Channel selects the Notifier ("telegram", "email", "webhook", ...).
	Channel string
	// Target is the channel's address: a chat, a mail address, a URL.
	Target string
	// LeaseToken is this take's fencing token; only it can record the step.
	LeaseToken string
	// LeasedUntil is when the lease runs out and another engine may take the step.
	LeasedUntil time.Time
}

// IdempotencyKey names this step of this ladder: the same for every take of the step, so a
// receiver can recognise a repeated delivery. Format: "<escalation_id>:<step_idx>".
func (s Step) IdempotencyKey() string {
	return fmt.Sprintf("%s:%d", s.EscalationID, s.StepIdx)
}

// Message is the human text of a step's notification.
func (s Step) Message() string {
	return fmt.Sprintf("ALERT %s is firing (escalation step %d)", s.AlertName, s.StepIdx+1)
}
