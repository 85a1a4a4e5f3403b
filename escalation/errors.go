package escalation

import "errors"

// ErrNoNotifier is journaled (as a failed delivery) for a step whose channel has no Notifier.
var ErrNoNotifier = errors.New("no notifier for the step's channel")
