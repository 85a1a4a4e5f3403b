package escalation

// Every statement the engine sends is here. Each calls an alr SQL function granted to
// pgdrain_worker (docs/security.md); the engine reads and writes no table itself, so a login role
// that is only a member of pgdrain_worker can run it.
const (
	// sqlTake leases due steps; alr.alert_name adds the alert's name for the message.
	sqlTake = `
		SELECT t.escalation_id::text, t.alert_id::text, coalesce(alr.alert_name(t.alert_id), ''),
		       t.step_idx, t.channel, t.target, t.lease_token::text, t.leased_until
		FROM alr.take_due_steps($1, $2) t`
	sqlApply          = `SELECT alr.apply_escalation($1::uuid, $2::uuid)`
	sqlRecordDelivery = `SELECT alr.record_delivery($1::uuid, $2, $3::uuid, $4)`
	sqlRelease        = `SELECT alr.release_step($1::uuid, $2::uuid)`
	sqlRecordedBy     = `SELECT alr.recorded_by($1::uuid, $2::uuid)`
	sqlChannelsInUse  = `SELECT channel, policies, running_ladders FROM alr.channels_in_use()`
	// sqlUnjournaled lists the steps recorded and never journaled for longer than $1, the first
	// $2 of them, each row with their total.
	sqlUnjournaled = `
		SELECT u.escalation_id::text, u.alert_id::text, u.step_idx, coalesce(u.channel, ''), coalesce(u.target, ''),
		       u.unjournaled_since, count(*) OVER ()
		FROM alr.unjournaled_steps($1) u
		LIMIT $2`
)
