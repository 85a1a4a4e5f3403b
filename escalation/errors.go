package escalation

import "errors"

// ErrNoNotifier reports a channel that no Notifier of the engine serves. A step of such a channel
// is never applied: the engine gives it back with alr.release_step (the ladder does not advance),
// logs this error with the channel and counts the step in
// pgdrain_escalation_unserved_steps_total{channel}.
var ErrNoNotifier = errors.New("no notifier for the step's channel")
