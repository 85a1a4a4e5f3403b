-- +goose Up
-- +goose StatementBegin
-- A step recorded and never journaled (record, then deliver, then journal: an engine killed after
-- the record) was a page probably never sent, and nothing showed it. The ladder keeps when its
-- oldest such step was recorded, NULL when it has none; alr.unjournaled_steps lists those older
-- than a bound, through the partial index. Ladders with steps recorded and not yet journaled when
-- this migration runs count from now.
ALTER TABLE alr.alert_escalations ADD COLUMN unjournaled_since timestamptz;
COMMENT ON COLUMN alr.alert_escalations.unjournaled_since IS
  'When the oldest step of this ladder that apply_escalation recorded and record_delivery has not '
  'journaled yet was recorded; NULL when every recorded step is journaled. A step unjournaled for '
  'longer than its engine''s lease, delivery timeout and journal retries was probably never '
  'delivered (alr.unjournaled_steps).';
UPDATE alr.alert_escalations e SET unjournaled_since = pg_catalog.now()
WHERE EXISTS (SELECT 1 FROM pg_catalog.unnest(e.applied_tokens) AS t(token) WHERE t.token IS NOT NULL);
CREATE INDEX alert_escalations_unjournaled ON alr.alert_escalations (unjournaled_since)
  WHERE unjournaled_since IS NOT NULL;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records that the step is being delivered ("record, then deliver": the caller delivers only after
-- true): advances step_idx and sets next_at from the next step's delay, or stops the ladder after
-- its last step; clears lease and token, keeping the token as the step's element of applied_tokens:
-- the one token record_delivery accepts, once, for this step, and the ladder's unjournaled_since
-- when it had no step waiting for its journal. Only when lease_token still matches
-- AND the ladder runs AND its alert is still firing; otherwise returns false and changes nothing at
-- all — not next_at, not step_idx, not leased_until (a late instance must not break the current
-- holder's lease).
CREATE OR REPLACE FUNCTION alr.apply_escalation(escalation_id uuid, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
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
      lease_token = NULL,
      applied_tokens[v_step_idx + 1] = apply_escalation.lease_token,
      unjournaled_since = COALESCE(e.unjournaled_since, pg_catalog.now())
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
-- Journals one delivery of a step that apply_escalation recorded, with error NULL for success,
-- fenced by the token: only the take whose apply_escalation recorded the step (lease_token =
-- the step's element of applied_tokens) journals it, and only once (the element is cleared in the
-- same statement, under the ladder's row lock, so two calls at once can not both pass, and with it
-- the ladder's unjournaled_since when no other step waits for its journal). Returns the
-- journal row's id, or NULL when refused (another token, or the step is journaled already): a
-- refused call changes nothing. channel, target and alert are read from the ladder, not trusted
-- from the caller. A blank error is refused (a failure needs its reason); the error is kept to its
-- first 4000 characters (a channel's whole error page could be megabytes).
CREATE OR REPLACE FUNCTION alr.record_delivery(escalation_id uuid, step_idx integer, lease_token uuid,
                                               error text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'record_delivery';
  v_e alr.alert_escalations;
  v_s alr.escalation_steps;
  v_id bigint;
BEGIN
  IF record_delivery.escalation_id IS NULL THEN
    PERFORM alr._invalid(fn, 'escalation_id must not be NULL, got NULL');
  END IF;
  IF record_delivery.lease_token IS NULL THEN
    PERFORM alr._invalid(fn, 'lease_token must not be NULL, got NULL');
  END IF;
  -- A failure journaled without a reason tells on call nothing: say why, or NULL for delivered.
  IF alr._is_blank(record_delivery.error) THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'error must be NULL (delivered) or say why the delivery failed, got %s', pg_catalog.quote_literal(record_delivery.error)));
  END IF;
  SELECT * INTO v_e FROM alr.alert_escalations e WHERE e.id = record_delivery.escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'escalation_id', 'escalation', record_delivery.escalation_id);
  END IF;
  IF record_delivery.step_idx IS NULL OR record_delivery.step_idx < 0
     OR record_delivery.step_idx >= v_e.step_idx THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'step_idx must be a step apply_escalation already recorded (%s), got %s',
      CASE WHEN v_e.step_idx = 0 THEN 'none yet' ELSE pg_catalog.format('0 to %s', v_e.step_idx - 1) END,
      COALESCE(record_delivery.step_idx::text, 'NULL')));
  END IF;
  UPDATE alr.alert_escalations e
  SET applied_tokens[record_delivery.step_idx + 1] = NULL,
      -- The oldest record time is kept while another step waits for its journal (conservative:
      -- that step was recorded no later).
      unjournaled_since = CASE WHEN EXISTS (
        SELECT 1 FROM pg_catalog.unnest(e.applied_tokens) WITH ORDINALITY AS u(token, i)
        WHERE u.token IS NOT NULL AND u.i <> record_delivery.step_idx + 1) THEN e.unjournaled_since END
  WHERE e.id = record_delivery.escalation_id
    AND e.applied_tokens[record_delivery.step_idx + 1] = record_delivery.lease_token;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  SELECT * INTO STRICT v_s FROM alr.escalation_steps s
  WHERE s.policy_id = v_e.policy_id AND s.step_idx = record_delivery.step_idx;
  INSERT INTO alr.delivery_journal (escalation_id, alert_id, step_idx, channel, target, lease_token,
                                    outcome, error)
  VALUES (v_e.id, v_e.alert_id, record_delivery.step_idx, v_s.channel, v_s.target,
          record_delivery.lease_token,
          CASE WHEN record_delivery.error IS NULL THEN 'delivered' ELSE 'failed' END,
          pg_catalog.left(record_delivery.error, 4000))
  RETURNING id INTO v_id;
  RETURN v_id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The steps that apply_escalation recorded and that no record_delivery has journaled since, on
-- ladders whose oldest such step was recorded more than older_than ago: pages probably never sent.
-- An engine records a step, then delivers it, then journals the outcome (seed 000: record, then
-- deliver; at most once), all within its lease, its delivery timeout and its journal retries; one
-- killed in between (SIGKILL, out of memory, a lost host) leaves the step recorded and undelivered,
-- and its ladder goes on to the next step. unjournaled_since is the ladder's oldest such step's
-- record time (one per ladder); channel and target are NULL when the policy's step is gone.
-- Read-only, through a partial index: its cost grows with such ladders, not with all of them.
CREATE OR REPLACE FUNCTION alr.unjournaled_steps(older_than interval DEFAULT '10 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              unjournaled_since timestamptz)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'unjournaled_steps';
BEGIN
  PERFORM alr._check_span(fn, 'older_than', unjournaled_steps.older_than);
  IF unjournaled_steps.older_than IS NULL OR unjournaled_steps.older_than < interval '0'
     OR unjournaled_steps.older_than > interval '366 days' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('older_than must be between 0 and 366 days, got %s',
      COALESCE(unjournaled_steps.older_than::text, 'NULL')));
  END IF;
  RETURN QUERY
  SELECT e.id, e.alert_id, (u.i - 1)::integer, s.channel, s.target, e.unjournaled_since
  FROM alr.alert_escalations e
  CROSS JOIN LATERAL pg_catalog.unnest(e.applied_tokens) WITH ORDINALITY AS u(token, i)
  LEFT JOIN alr.escalation_steps s ON s.policy_id = e.policy_id AND s.step_idx = u.i - 1
  WHERE e.unjournaled_since IS NOT NULL
    AND e.unjournaled_since <= pg_catalog.now() - unjournaled_steps.older_than
    AND u.token IS NOT NULL
  ORDER BY e.unjournaled_since, e.id, u.i;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Leases up to batch_size due steps (next_at passed, ladder running, lease free or expired) for
-- `lease`, in next_at order, FOR UPDATE SKIP LOCKED so concurrent instances split the work. Every
-- row gets its own fresh lease_token (core.new_id() is evaluated per row in the SET): the lease is
-- only a deadline, the token is ownership, and apply_escalation records only with a matching token.
-- A lease that ends more than a day ahead (the longest a take hands out) was written by a clock that
-- has since been set back: it counts as over, or its step waited as long as the clock had jumped.
-- Due and lease are read from the clock, not now() (the transaction's start): a client whose
-- driver opens transactions implicitly (psycopg2, JDBC without autocommit) would otherwise take in
-- a transaction begun long before, and be handed a lease already over.
CREATE OR REPLACE FUNCTION alr.take_due_steps(batch_size integer DEFAULT 100, lease interval DEFAULT '2 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              lease_token uuid, leased_until timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'take_due_steps';
  v_clock constant timestamptz := pg_catalog.clock_timestamp();
BEGIN
  IF take_due_steps.batch_size IS NULL OR take_due_steps.batch_size < 1 OR take_due_steps.batch_size > 10000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('batch_size must be between 1 and 10000, got %s',
      COALESCE(take_due_steps.batch_size::text, 'NULL')));
  END IF;
  PERFORM alr._check_span(fn, 'lease', take_due_steps.lease);
  IF take_due_steps.lease IS NULL OR take_due_steps.lease <= interval '0' OR take_due_steps.lease > interval '1 day' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('lease must be greater than 0 and at most 1 day, got %s',
      COALESCE(take_due_steps.lease::text, 'NULL')));
  END IF;
  RETURN QUERY
  WITH due AS (
    SELECT d.id FROM alr.alert_escalations d
    WHERE d.stopped_at IS NULL AND d.next_at <= v_clock
      AND (d.leased_until IS NULL OR d.leased_until <= v_clock
           OR d.leased_until > v_clock + interval '1 day')
    ORDER BY d.next_at, d.id
    LIMIT take_due_steps.batch_size
    FOR UPDATE SKIP LOCKED
  ), taken AS (
    UPDATE alr.alert_escalations e
    SET leased_until = v_clock + take_due_steps.lease,
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
-- The version of the alr schema (the escalation ladder) installed in this database: the release it
-- belongs to and the number of the last migration applied (the file migrations/alr/NNNNN_*.sql). The
-- escalation engine checks migration >= the one it needs before it starts.
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION alr.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 13;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema alr (canonical source; migration alr/00004 carries the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
-- The roles are the outbox's three (pgdrain_worker, pgdrain_producer, pgdrain_operator).
--
-- Nothing in alr is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA alr FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA alr REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA alr TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- SECURITY DEFINER: callers get exactly what the function does and no privilege on any alr table,
-- so an engine can not advance a ladder or clear a token with a plain UPDATE, and nobody but the
-- owner writes the delivery journal except through record_delivery. Each validates its arguments
-- and pins search_path (pg_catalog, then pg_temp: docs/security.md).
ALTER FUNCTION alr.take_due_steps(integer, interval) SECURITY DEFINER;
ALTER FUNCTION alr.apply_escalation(uuid, uuid) SECURITY DEFINER;
ALTER FUNCTION alr.release_step(uuid, uuid) SECURITY DEFINER;
ALTER FUNCTION alr.record_delivery(uuid, integer, uuid, text) SECURITY DEFINER;
ALTER FUNCTION alr.alert_name(uuid) SECURITY DEFINER;
ALTER FUNCTION alr.channels_in_use() SECURITY DEFINER;
ALTER FUNCTION alr.add_alert(text) SECURITY DEFINER;
ALTER FUNCTION alr.start_escalation(uuid, uuid) SECURITY DEFINER;
ALTER FUNCTION alr.resolve_alert(uuid) SECURITY DEFINER;
ALTER FUNCTION alr.create_policy(text, jsonb) SECURITY DEFINER;

-- Workers run the escalation engine: take, record, give back, journal; the alert's name for the
-- message and the channels the policies use (the engine's start-up check).
GRANT EXECUTE ON FUNCTION
  alr.take_due_steps(integer, interval),
  alr.apply_escalation(uuid, uuid),
  alr.release_step(uuid, uuid),
  alr.record_delivery(uuid, integer, uuid, text),
  alr.alert_name(uuid),
  alr.channels_in_use()
  TO pgdrain_worker;

-- Producers are what raises alerts (the monitoring system): add, start a ladder, resolve.
GRANT EXECUTE ON FUNCTION
  alr.add_alert(text),
  alr.start_escalation(uuid, uuid),
  alr.resolve_alert(uuid)
  TO pgdrain_producer;

-- Operators write policies, see which channels they use, and read the ladder's state (no payloads
-- live here: names, channels, targets, steps, the journal). They can change no row directly.
GRANT EXECUTE ON FUNCTION
  alr.create_policy(text, jsonb),
  alr.channels_in_use()
  TO pgdrain_operator;
GRANT SELECT ON alr.alerts, alr.escalation_policies, alr.escalation_steps, alr.alert_escalations,
  alr.delivery_journal TO pgdrain_operator;

-- The _ helpers (_invalid, _not_found, _escalation_known, _check_span, _is_blank, _shown) stay INVOKER and
-- are granted to nobody (the REVOKE above): only the functions above, running as the owner, call them.

-- Operators resolve an alert from the console; readers see the ladders (no payloads live here).
GRANT EXECUTE ON FUNCTION alr.resolve_alert(uuid) TO pgdrain_operator;
GRANT SELECT ON alr.alerts, alr.escalation_policies, alr.escalation_steps, alr.alert_escalations,
  alr.delivery_journal TO pgdrain_reader;

-- Everyone who may use the schema reads its version (alr.version: a constant, no data): the
-- escalation engine checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION alr.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- Acknowledgement (alr 00006): operators acknowledge (the console, on call); readers and operators
-- read the resolved alerts and who acknowledged what. acknowledge_alert is DEFINER: nobody writes
-- alert_acknowledgements or stops a ladder directly.
ALTER FUNCTION alr.acknowledge_alert(uuid, text) SECURITY DEFINER;
ALTER FUNCTION alr.resolved_alerts(integer) SECURITY DEFINER;
GRANT EXECUTE ON FUNCTION alr.acknowledge_alert(uuid, text) TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION alr.resolved_alerts(integer) TO pgdrain_reader, pgdrain_operator;
GRANT SELECT ON alr.alert_acknowledgements TO pgdrain_reader, pgdrain_operator;

-- An engine whose apply's answer was lost asks which step its token recorded (alr 00012).
ALTER FUNCTION alr.recorded_by(uuid, uuid) SECURITY DEFINER;
GRANT EXECUTE ON FUNCTION alr.recorded_by(uuid, uuid) TO pgdrain_worker;

-- Steps recorded and never journaled (alr 00013): the engine's gauge, the console and on call.
ALTER FUNCTION alr.unjournaled_steps(interval) SECURITY DEFINER;
GRANT EXECUTE ON FUNCTION alr.unjournaled_steps(interval) TO pgdrain_worker, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP FUNCTION alr.unjournaled_steps(interval);
DROP INDEX alr.alert_escalations_unjournaled;
ALTER TABLE alr.alert_escalations DROP COLUMN unjournaled_since;
-- +goose StatementEnd


-- +goose StatementBegin
-- Records that the step is being delivered ("record, then deliver": the caller delivers only after
-- true): advances step_idx and sets next_at from the next step's delay, or stops the ladder after
-- its last step; clears lease and token, keeping the token as the step's element of applied_tokens:
-- the one token record_delivery accepts, once, for this step. Only when lease_token still matches
-- AND the ladder runs AND its alert is still firing; otherwise returns false and changes nothing at
-- all — not next_at, not step_idx, not leased_until (a late instance must not break the current
-- holder's lease).
CREATE OR REPLACE FUNCTION alr.apply_escalation(escalation_id uuid, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
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
      lease_token = NULL,
      applied_tokens[v_step_idx + 1] = apply_escalation.lease_token
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
-- Journals one delivery of a step that apply_escalation recorded, with error NULL for success,
-- fenced by the token: only the take whose apply_escalation recorded the step (lease_token =
-- the step's element of applied_tokens) journals it, and only once (the element is cleared in the
-- same statement, under the ladder's row lock, so two calls at once can not both pass). Returns the
-- journal row's id, or NULL when refused (another token, or the step is journaled already): a
-- refused call changes nothing. channel, target and alert are read from the ladder, not trusted
-- from the caller. The error is kept to its first 4000 characters (a channel's whole error page
-- could be megabytes).
CREATE OR REPLACE FUNCTION alr.record_delivery(escalation_id uuid, step_idx integer, lease_token uuid,
                                               error text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'record_delivery';
  v_e alr.alert_escalations;
  v_s alr.escalation_steps;
  v_id bigint;
BEGIN
  IF record_delivery.escalation_id IS NULL THEN
    PERFORM alr._invalid(fn, 'escalation_id must not be NULL, got NULL');
  END IF;
  IF record_delivery.lease_token IS NULL THEN
    PERFORM alr._invalid(fn, 'lease_token must not be NULL, got NULL');
  END IF;
  SELECT * INTO v_e FROM alr.alert_escalations e WHERE e.id = record_delivery.escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'escalation_id', 'escalation', record_delivery.escalation_id);
  END IF;
  IF record_delivery.step_idx IS NULL OR record_delivery.step_idx < 0
     OR record_delivery.step_idx >= v_e.step_idx THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'step_idx must be a step apply_escalation already recorded (%s), got %s',
      CASE WHEN v_e.step_idx = 0 THEN 'none yet' ELSE pg_catalog.format('0 to %s', v_e.step_idx - 1) END,
      COALESCE(record_delivery.step_idx::text, 'NULL')));
  END IF;
  UPDATE alr.alert_escalations e
  SET applied_tokens[record_delivery.step_idx + 1] = NULL
  WHERE e.id = record_delivery.escalation_id
    AND e.applied_tokens[record_delivery.step_idx + 1] = record_delivery.lease_token;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  SELECT * INTO STRICT v_s FROM alr.escalation_steps s
  WHERE s.policy_id = v_e.policy_id AND s.step_idx = record_delivery.step_idx;
  INSERT INTO alr.delivery_journal (escalation_id, alert_id, step_idx, channel, target, lease_token,
                                    outcome, error)
  VALUES (v_e.id, v_e.alert_id, record_delivery.step_idx, v_s.channel, v_s.target,
          record_delivery.lease_token,
          CASE WHEN record_delivery.error IS NULL THEN 'delivered' ELSE 'failed' END,
          pg_catalog.left(record_delivery.error, 4000))
  RETURNING id INTO v_id;
  RETURN v_id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Leases up to batch_size due steps (next_at passed, ladder running, lease free or expired) for
-- `lease`, in next_at order, FOR UPDATE SKIP LOCKED so concurrent instances split the work. Every
-- row gets its own fresh lease_token (core.new_id() is evaluated per row in the SET): the lease is
-- only a deadline, the token is ownership, and apply_escalation records only with a matching token.
-- A lease that ends more than a day ahead (the longest a take hands out) was written by a clock that
-- has since been set back: it counts as over, or its step waited as long as the clock had jumped.
CREATE OR REPLACE FUNCTION alr.take_due_steps(batch_size integer DEFAULT 100, lease interval DEFAULT '2 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              lease_token uuid, leased_until timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'take_due_steps';
BEGIN
  IF take_due_steps.batch_size IS NULL OR take_due_steps.batch_size < 1 OR take_due_steps.batch_size > 10000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('batch_size must be between 1 and 10000, got %s',
      COALESCE(take_due_steps.batch_size::text, 'NULL')));
  END IF;
  PERFORM alr._check_span(fn, 'lease', take_due_steps.lease);
  IF take_due_steps.lease IS NULL OR take_due_steps.lease <= interval '0' OR take_due_steps.lease > interval '1 day' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('lease must be greater than 0 and at most 1 day, got %s',
      COALESCE(take_due_steps.lease::text, 'NULL')));
  END IF;
  RETURN QUERY
  WITH due AS (
    SELECT d.id FROM alr.alert_escalations d
    WHERE d.stopped_at IS NULL AND d.next_at <= pg_catalog.now()
      AND (d.leased_until IS NULL OR d.leased_until <= pg_catalog.now()
           -- From the clock: a take whose transaction began earlier must not count another's
           -- fresh 1-day lease as one from a jumped clock.
           OR d.leased_until > pg_catalog.clock_timestamp() + interval '1 day')
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
-- The version of the alr schema (the escalation ladder) installed in this database: the release it
-- belongs to and the number of the last migration applied (the file migrations/alr/NNNNN_*.sql). The
-- escalation engine checks migration >= the one it needs before it starts.
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION alr.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 12;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema alr (canonical source; migration alr/00004 carries the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
-- The roles are the outbox's three (pgdrain_worker, pgdrain_producer, pgdrain_operator).
--
-- Nothing in alr is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA alr FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA alr REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA alr TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- SECURITY DEFINER: callers get exactly what the function does and no privilege on any alr table,
-- so an engine can not advance a ladder or clear a token with a plain UPDATE, and nobody but the
-- owner writes the delivery journal except through record_delivery. Each validates its arguments
-- and pins search_path (pg_catalog, then pg_temp: docs/security.md).
ALTER FUNCTION alr.take_due_steps(integer, interval) SECURITY DEFINER;
ALTER FUNCTION alr.apply_escalation(uuid, uuid) SECURITY DEFINER;
ALTER FUNCTION alr.release_step(uuid, uuid) SECURITY DEFINER;
ALTER FUNCTION alr.record_delivery(uuid, integer, uuid, text) SECURITY DEFINER;
ALTER FUNCTION alr.alert_name(uuid) SECURITY DEFINER;
ALTER FUNCTION alr.channels_in_use() SECURITY DEFINER;
ALTER FUNCTION alr.add_alert(text) SECURITY DEFINER;
ALTER FUNCTION alr.start_escalation(uuid, uuid) SECURITY DEFINER;
ALTER FUNCTION alr.resolve_alert(uuid) SECURITY DEFINER;
ALTER FUNCTION alr.create_policy(text, jsonb) SECURITY DEFINER;

-- Workers run the escalation engine: take, record, give back, journal; the alert's name for the
-- message and the channels the policies use (the engine's start-up check).
GRANT EXECUTE ON FUNCTION
  alr.take_due_steps(integer, interval),
  alr.apply_escalation(uuid, uuid),
  alr.release_step(uuid, uuid),
  alr.record_delivery(uuid, integer, uuid, text),
  alr.alert_name(uuid),
  alr.channels_in_use()
  TO pgdrain_worker;

-- Producers are what raises alerts (the monitoring system): add, start a ladder, resolve.
GRANT EXECUTE ON FUNCTION
  alr.add_alert(text),
  alr.start_escalation(uuid, uuid),
  alr.resolve_alert(uuid)
  TO pgdrain_producer;

-- Operators write policies, see which channels they use, and read the ladder's state (no payloads
-- live here: names, channels, targets, steps, the journal). They can change no row directly.
GRANT EXECUTE ON FUNCTION
  alr.create_policy(text, jsonb),
  alr.channels_in_use()
  TO pgdrain_operator;
GRANT SELECT ON alr.alerts, alr.escalation_policies, alr.escalation_steps, alr.alert_escalations,
  alr.delivery_journal TO pgdrain_operator;

-- The _ helpers (_invalid, _not_found, _escalation_known, _check_span, _is_blank, _shown) stay INVOKER and
-- are granted to nobody (the REVOKE above): only the functions above, running as the owner, call them.

-- Operators resolve an alert from the console; readers see the ladders (no payloads live here).
GRANT EXECUTE ON FUNCTION alr.resolve_alert(uuid) TO pgdrain_operator;
GRANT SELECT ON alr.alerts, alr.escalation_policies, alr.escalation_steps, alr.alert_escalations,
  alr.delivery_journal TO pgdrain_reader;

-- Everyone who may use the schema reads its version (alr.version: a constant, no data): the
-- escalation engine checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION alr.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- Acknowledgement (alr 00006): operators acknowledge (the console, on call); readers and operators
-- read the resolved alerts and who acknowledged what. acknowledge_alert is DEFINER: nobody writes
-- alert_acknowledgements or stops a ladder directly.
ALTER FUNCTION alr.acknowledge_alert(uuid, text) SECURITY DEFINER;
ALTER FUNCTION alr.resolved_alerts(integer) SECURITY DEFINER;
GRANT EXECUTE ON FUNCTION alr.acknowledge_alert(uuid, text) TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION alr.resolved_alerts(integer) TO pgdrain_reader, pgdrain_operator;
GRANT SELECT ON alr.alert_acknowledgements TO pgdrain_reader, pgdrain_operator;

-- An engine whose apply's answer was lost asks which step its token recorded (alr 00012).
ALTER FUNCTION alr.recorded_by(uuid, uuid) SECURITY DEFINER;
GRANT EXECUTE ON FUNCTION alr.recorded_by(uuid, uuid) TO pgdrain_worker;
-- +goose StatementEnd
