package escalation

// Every statement the engine sends is here. Each calls an alr SQL function granted to
// pgdrain_worker (docs/security.md); the engine reads and writes no table itself, so a login role
// that is only a member of pgdrain_worker can run it.
const (
	// sqlTake leases due steps; alr.alert_name adds the alert's name for the message.
	// Times come back as integer microseconds (as the drainer's, drainer/queries.go): their text
	// depends on the session's DateStyle, and a pool that reads results as text (behind PgBouncer:
	// default_query_exec_mode exec) parses only the ISO and postgres styles.
	sqlTake = `
		SELECT t.escalation_id::text, t.alert_id::text, coalesce(alr.alert_name(t.alert_id), ''),
		       t.step_idx, t.channel, t.target, t.lease_token::text,
		       (extract(epoch FROM t.leased_until) * 1000000)::int8
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
		       (extract(epoch FROM u.unjournaled_since) * 1000000)::int8, count(*) OVER ()
		FROM alr.unjournaled_steps($1) u
		LIMIT $2`
)
