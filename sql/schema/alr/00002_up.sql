-- =====================================================================
-- escalation_lease_token: a step's lease gets a token — whoever took it is the one who records it.
-- (Seed 000, NetPulse 0073_escalation_lease_token, translated.)
--
-- WHAT WAS WRONG
--
-- The row lease (leased_until) did exactly half the job. It honestly closes the window "taken —
-- not yet recorded": until the lease expires, a second instance does not see the step. But a lease
-- is a deadline, not ownership, and it knows nothing about the second half.
--
-- The deadline is two minutes, a batch is up to a hundred steps, and every delivery in it has its
-- OWN network timeout: Telegram, SMTP, a webhook into someone else's network. So "the batch is
-- longer than the lease" is not a rare coincidence but an ordinary evening when one channel hangs.
--
-- Then the arithmetic is simple. The lease expires while the first instance is still walking the
-- batch. The second one (or the next tick of the same process) sees the row free, takes the same
-- step — with the same step_idx, because the first has not advanced it yet — and delivers it. A
-- minute later the first one reaches it and delivers it a second time. At 3 a.m. that is two calls,
-- and the journal has two "sent" lines: the evidence becomes an excuse, it does not show that the
-- system called twice for one step.
--
-- apply_escalation had TWO state checks (stopped_at IS NULL and "the alert is still firing"), and
-- both are needed — but both are about the ALERT. Neither is about whether the lease is still
-- ours. There was nothing to compare: the row held only a deadline, and the first instance's
-- deadline looked exactly like the second's.
--
-- WHY A TOKEN, NOT A LONGER LEASE
--
-- The temptation is obvious: make the lease twenty minutes and the batch always fits. That is not
-- a fix but a moved boundary. Whatever is set, a longer batch will come: a hundred steps over three
-- channels, each with its own timeout, is arithmetic, not pathology. Besides, a long lease spoils
-- the opposite case: a process that died right after taking holds the step hostage for exactly
-- that long, and an escalation step is someone who was not woken up.
--
-- The token removes both: the lease stays short (died — the step is quickly retaken), and the
-- duplication is closed by an ownership check that does not depend on the deadline at all. It is
-- the same fencing token as in distributed locks: ownership is proven not by the clock not having
-- struck yet, but by the number matching.
--
-- WHY A TOKEN PER ROW, NOT PER BATCH
--
-- One token for the whole batch would also close the duplication, with one line less of code. But
-- then two different runs that split one batch (that is what SKIP LOCKED is there for) would differ
-- only by chance, and the row would not say WHICH take holds it. core.new_id() in the SET is
-- evaluated for every row separately — the cost is zero, and the column becomes self-sufficient:
-- it names a specific take of a specific step.
--
-- WHAT HAPPENS WHEN THE TOKEN DOES NOT MATCH
--
-- Nothing happens — and that is the main requirement on this column. The UPDATE touches NO row:
-- not next_at, not step_idx, not leased_until (otherwise a late instance would break the lease of
-- the one working now). The engine sees applied = false, nothing goes to the network, and the step
-- stays due — with the same step_idx and the same next_at in the past. It is settled by whoever's
-- token is in the row; if that one does not get there either, the lease expires within two minutes
-- and the next tick takes the step again. Nothing can get stuck forever: no branch clears next_at
-- or extends a lease endlessly.
--
-- COMPATIBILITY
--
-- The column is NULL for all existing rows, and that is the right state: NULL means "nobody holds
-- it now". Leases alive at upgrade time (two minutes at most) get a token on their next take. There
-- is deliberately no NOT NULL: a free row must be able to say "nobody's", not carry a ghost token
-- from the take before last. The pre-token apply_escalation(uuid) is dropped in the same
-- transaction, so an engine still running the old code gets an error and delivers nothing.
-- =====================================================================

-- The result gains lease_token, and the old one-argument apply must not survive next to the fenced
-- one (it would record without any ownership check).
DROP FUNCTION alr.take_due_steps(integer, interval);
DROP FUNCTION alr.apply_escalation(uuid);

ALTER TABLE alr.alert_escalations
  ADD COLUMN IF NOT EXISTS lease_token uuid;

COMMENT ON COLUMN alr.alert_escalations.lease_token IS
  'Token of the current lease (fencing). Set together with leased_until when the step is taken, '
  'checked when the decision is recorded and cleared together with the lease. NULL = nobody holds '
  'the step now. Needed because processing a batch can take longer than the lease: without an '
  'ownership check a late instance would deliver a step already delivered by the one that retook '
  'it after the lease expired.';

COMMENT ON COLUMN alr.alert_escalations.leased_until IS
  'Until when the step counts as taken into work. A deadline, not ownership: ownership is proven '
  'by lease_token.';
