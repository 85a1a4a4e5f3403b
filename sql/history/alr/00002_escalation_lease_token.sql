-- +goose Up
-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates the (escalation_id, lease_token) pair of apply_escalation and release_step: both
-- non-NULL (a NULL token would mean "free", which no caller holds) and the escalation exists.
CREATE OR REPLACE FUNCTION alr._escalation_known(p_function text, p_escalation_id uuid, p_lease_token uuid)
RETURNS void
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
BEGIN
  IF p_escalation_id IS NULL THEN
    PERFORM alr._invalid(p_function, 'escalation_id must not be NULL, got NULL');
  END IF;
  IF p_lease_token IS NULL THEN
    PERFORM alr._invalid(p_function, 'lease_token must not be NULL, got NULL');
  END IF;
  PERFORM 1 FROM alr.alert_escalations e WHERE e.id = p_escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(p_function, 'escalation_id', 'escalation', p_escalation_id);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Leases up to batch_size due steps (next_at passed, ladder running, lease free or expired) for
-- `lease`, in next_at order, FOR UPDATE SKIP LOCKED so concurrent instances split the work. Every
-- row gets its own fresh lease_token (core.new_id() is evaluated per row in the SET): the lease is
-- only a deadline, the token is ownership, and apply_escalation records only with a matching token.
CREATE OR REPLACE FUNCTION alr.take_due_steps(batch_size integer DEFAULT 100, lease interval DEFAULT '2 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              lease_token uuid, leased_until timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'take_due_steps';
BEGIN
  IF take_due_steps.batch_size IS NULL OR take_due_steps.batch_size < 1 OR take_due_steps.batch_size > 10000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('batch_size must be between 1 and 10000, got %s',
      COALESCE(take_due_steps.batch_size::text, 'NULL')));
  END IF;
  IF take_due_steps.lease IS NULL OR take_due_steps.lease <= interval '0' OR take_due_steps.lease > interval '1 day' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('lease must be greater than 0 and at most 1 day, got %s',
      COALESCE(take_due_steps.lease::text, 'NULL')));
  END IF;
  RETURN QUERY
  WITH due AS (
    SELECT d.id FROM alr.alert_escalations d
    WHERE d.stopped_at IS NULL AND d.next_at <= pg_catalog.now()
      AND (d.leased_until IS NULL OR d.leased_until <= pg_catalog.now())
    ORDER BY d.next_at, d.id
    LIMIT take_due_steps.batch_size
    FOR UPDATE SKIP LOCKED
  ), taken AS (
    UPDATE alr.alert_escalations e
    SET leased_until = pg_catalog.now() + take_due_steps.lease,
        lease_token = core.new_id()
    FROM due WHERE e.id = due.id
    RETURNING e.id, e.alert_id, e.policy_id, e.step_idx, e.next_at, e.lease_token, e.leased_until
  )
  SELECT t.id, t.alert_id, t.step_idx, s.channel, s.target, t.lease_token, t.leased_until
  FROM taken t
  JOIN alr.escalation_steps s ON s.policy_id = t.policy_id AND s.step_idx = t.step_idx
  ORDER BY t.next_at, t.id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records that the step is being delivered ("record, then deliver": the caller delivers only after
-- true): advances step_idx and sets next_at from the next step's delay, or stops the ladder after
-- its last step; clears lease and token. Only when lease_token still matches AND the ladder runs
-- AND its alert is still firing; otherwise returns false and changes nothing at all — not next_at,
-- not step_idx, not leased_until (a late instance must not break the current holder's lease).
CREATE OR REPLACE FUNCTION alr.apply_escalation(escalation_id uuid, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'apply_escalation';
  v_step_idx integer;
  v_policy_id uuid;
  v_next_delay interval;
  v_last boolean;
BEGIN
  PERFORM alr._escalation_known(fn, apply_escalation.escalation_id, apply_escalation.lease_token);
  SELECT e.step_idx, e.policy_id INTO v_step_idx, v_policy_id
  FROM alr.alert_escalations e WHERE e.id = apply_escalation.escalation_id;
  SELECT s.delay INTO v_next_delay FROM alr.escalation_steps s
  WHERE s.policy_id = v_policy_id AND s.step_idx = v_step_idx + 1;
  v_last := NOT FOUND;
  -- The token decides ownership; step_idx = v_step_idx makes the computed next step consistent
  -- with the row that is written (both are re-checked on the locked row version).
  UPDATE alr.alert_escalations e
  SET step_idx = v_step_idx + 1,
      next_at = CASE WHEN v_last THEN NULL ELSE pg_catalog.now() + v_next_delay END,
      stopped_at = CASE WHEN v_last THEN pg_catalog.now() END,
      stop_reason = CASE WHEN v_last THEN 'completed' END,
      leased_until = NULL,
      lease_token = NULL
  FROM alr.alerts a
  WHERE e.id = apply_escalation.escalation_id
    AND e.lease_token = apply_escalation.lease_token
    AND e.step_idx = v_step_idx
    AND e.stopped_at IS NULL
    AND a.id = e.alert_id AND a.state = 'firing';
  RETURN FOUND;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a taken step back untouched (lease and token cleared, step_idx and next_at kept), so the
-- next take gets it at once instead of after the lease — used by an engine that stops before
-- applying. false (and nothing changed) when the lease is no longer ours.
CREATE OR REPLACE FUNCTION alr.release_step(escalation_id uuid, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
BEGIN
  PERFORM alr._escalation_known('release_step', release_step.escalation_id, release_step.lease_token);
  UPDATE alr.alert_escalations e
  SET leased_until = NULL, lease_token = NULL
  WHERE e.id = release_step.escalation_id AND e.lease_token = release_step.lease_token;
  RETURN FOUND;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Resolves a firing alert and stops all its running ladders (next_at, lease and token cleared), in
-- one transaction, so a late apply_escalation for any of their steps finds stopped_at set and
-- records nothing. Idempotent: resolving a resolved alert changes nothing.
CREATE OR REPLACE FUNCTION alr.resolve_alert(alert_id uuid)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'resolve_alert';
BEGIN
  IF resolve_alert.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  -- Lock order alert, then ladders: the same as start_escalation's.
  PERFORM 1 FROM alr.alerts a WHERE a.id = resolve_alert.alert_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'alert_id', 'alert', resolve_alert.alert_id);
  END IF;
  UPDATE alr.alerts a SET state = 'resolved', resolved_at = pg_catalog.now()
  WHERE a.id = resolve_alert.alert_id AND a.state = 'firing';
  UPDATE alr.alert_escalations e
  SET stopped_at = pg_catalog.now(), stop_reason = 'resolved', next_at = NULL, leased_until = NULL,
      lease_token = NULL
  WHERE e.alert_id = resolve_alert.alert_id AND e.stopped_at IS NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Back to the pre-token ladder: the fenced functions go, the column goes, the old bodies return.
DROP FUNCTION alr.release_step(uuid, uuid);
DROP FUNCTION alr._escalation_known(text, uuid, uuid);
DROP FUNCTION alr.apply_escalation(uuid, uuid);
DROP FUNCTION alr.take_due_steps(integer, interval);
ALTER TABLE alr.alert_escalations DROP COLUMN lease_token;
COMMENT ON COLUMN alr.alert_escalations.leased_until IS
  'Until when the step is taken into work: while the lease lasts no other instance sees the step.';

-- Leases up to batch_size due steps (next_at passed, ladder running, lease free or expired) for
-- `lease`, in next_at order, FOR UPDATE SKIP LOCKED so concurrent instances split the work.
-- The lease only hides a step for a while; apply_escalation records the decision.
CREATE OR REPLACE FUNCTION alr.take_due_steps(batch_size integer DEFAULT 100, lease interval DEFAULT '2 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              leased_until timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'take_due_steps';
BEGIN
  IF take_due_steps.batch_size IS NULL OR take_due_steps.batch_size < 1 OR take_due_steps.batch_size > 10000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('batch_size must be between 1 and 10000, got %s',
      COALESCE(take_due_steps.batch_size::text, 'NULL')));
  END IF;
  IF take_due_steps.lease IS NULL OR take_due_steps.lease <= interval '0' OR take_due_steps.lease > interval '1 day' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('lease must be greater than 0 and at most 1 day, got %s',
      COALESCE(take_due_steps.lease::text, 'NULL')));
  END IF;
  RETURN QUERY
  WITH due AS (
    SELECT d.id FROM alr.alert_escalations d
    WHERE d.stopped_at IS NULL AND d.next_at <= pg_catalog.now()
      AND (d.leased_until IS NULL OR d.leased_until <= pg_catalog.now())
    ORDER BY d.next_at, d.id
    LIMIT take_due_steps.batch_size
    FOR UPDATE SKIP LOCKED
  ), taken AS (
    UPDATE alr.alert_escalations e
    SET leased_until = pg_catalog.now() + take_due_steps.lease
    FROM due WHERE e.id = due.id
    RETURNING e.id, e.alert_id, e.policy_id, e.step_idx, e.next_at, e.leased_until
  )
  SELECT t.id, t.alert_id, t.step_idx, s.channel, s.target, t.leased_until
  FROM taken t
  JOIN alr.escalation_steps s ON s.policy_id = t.policy_id AND s.step_idx = t.step_idx
  ORDER BY t.next_at, t.id;
END;
$$;

-- Records that the step is being delivered: advances step_idx and sets next_at from the next
-- step's delay, or stops the ladder after its last step; clears the lease. Only while the ladder
-- runs (stopped_at IS NULL) and its alert is still firing; otherwise returns false and changes
-- nothing. The caller delivers only after true.
CREATE OR REPLACE FUNCTION alr.apply_escalation(escalation_id uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'apply_escalation';
  v_step_idx integer;
  v_policy_id uuid;
  v_next_delay interval;
  v_last boolean;
BEGIN
  IF apply_escalation.escalation_id IS NULL THEN
    PERFORM alr._invalid(fn, 'escalation_id must not be NULL, got NULL');
  END IF;
  SELECT e.step_idx, e.policy_id INTO v_step_idx, v_policy_id
  FROM alr.alert_escalations e WHERE e.id = apply_escalation.escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'escalation_id', 'escalation', apply_escalation.escalation_id);
  END IF;
  SELECT s.delay INTO v_next_delay FROM alr.escalation_steps s
  WHERE s.policy_id = v_policy_id AND s.step_idx = v_step_idx + 1;
  v_last := NOT FOUND;
  -- step_idx = v_step_idx: if another transaction advanced the step meanwhile, the re-checked
  -- row no longer matches and nothing is written.
  UPDATE alr.alert_escalations e
  SET step_idx = v_step_idx + 1,
      next_at = CASE WHEN v_last THEN NULL ELSE pg_catalog.now() + v_next_delay END,
      stopped_at = CASE WHEN v_last THEN pg_catalog.now() END,
      stop_reason = CASE WHEN v_last THEN 'completed' END,
      leased_until = NULL
  FROM alr.alerts a
  WHERE e.id = apply_escalation.escalation_id
    AND e.step_idx = v_step_idx
    AND e.stopped_at IS NULL
    AND a.id = e.alert_id AND a.state = 'firing';
  RETURN FOUND;
END;
$$;

-- Resolves a firing alert and stops all its running ladders (next_at, lease and token cleared), in
-- one transaction, so a late apply_escalation for any of their steps finds stopped_at set and
-- records nothing. Idempotent: resolving a resolved alert changes nothing.
CREATE OR REPLACE FUNCTION alr.resolve_alert(alert_id uuid)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'resolve_alert';
BEGIN
  IF resolve_alert.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  -- Lock order alert, then ladders: the same as start_escalation's.
  PERFORM 1 FROM alr.alerts a WHERE a.id = resolve_alert.alert_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'alert_id', 'alert', resolve_alert.alert_id);
  END IF;
  UPDATE alr.alerts a SET state = 'resolved', resolved_at = pg_catalog.now()
  WHERE a.id = resolve_alert.alert_id AND a.state = 'firing';
  UPDATE alr.alert_escalations e
  SET stopped_at = pg_catalog.now(), stop_reason = 'resolved', next_at = NULL, leased_until = NULL
  WHERE e.alert_id = resolve_alert.alert_id AND e.stopped_at IS NULL;
END;
$$;
-- +goose StatementEnd
