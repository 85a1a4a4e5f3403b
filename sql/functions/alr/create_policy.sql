-- Creates an escalation policy from a JSON array of steps, each exactly
-- {"delay": "<interval>", "channel": "<name>", "target": "<address>"}; returns its id. Everything is
-- validated before anything is written, so a rejected policy leaves no trace. A name or a channel is
-- at most 200 characters (a channel is a metric label), a target at most 1000; none may be blank
-- (alr._is_blank: Unicode white space and zero-width characters too).
CREATE OR REPLACE FUNCTION alr.create_policy(name text, steps jsonb)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'create_policy';
  v_id uuid := core.new_id();
  v_step jsonb;
  v_idx integer := 0;
  v_delays interval[] := '{}';
  v_delay interval;
  v_key text;
BEGIN
  -- The length first: a blank name over the cap is not echoed whole in the error.
  IF pg_catalog.length(create_policy.name) > 200 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('name must be at most 200 characters, got %s characters',
      pg_catalog.length(create_policy.name)));
  END IF;
  IF create_policy.name IS NULL OR alr._is_blank(create_policy.name) THEN
    PERFORM alr._invalid(fn, pg_catalog.format('name must be a non-empty text, got %s',
      COALESCE(pg_catalog.quote_literal(create_policy.name), 'NULL')));
  END IF;
  IF steps IS NULL OR pg_catalog.jsonb_typeof(steps) <> 'array' OR pg_catalog.jsonb_array_length(steps) = 0
     OR pg_catalog.jsonb_array_length(steps) > 100 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('steps must be a JSON array of 1 to 100 steps, got %s',
      COALESCE(alr._shown(steps), 'NULL')));
  END IF;
  FOR v_step IN SELECT s.value FROM pg_catalog.jsonb_array_elements(steps) WITH ORDINALITY AS s(value, n) ORDER BY s.n LOOP
    IF pg_catalog.jsonb_typeof(v_step) <> 'object' THEN
      PERFORM alr._invalid(fn, pg_catalog.format(
        'steps[%s] must be an object {"delay", "channel", "target"}, got %s', v_idx, alr._shown(v_step)));
    END IF;
    FOR v_key IN SELECT k FROM pg_catalog.jsonb_object_keys(v_step) AS k ORDER BY k LOOP
      IF v_key NOT IN ('delay', 'channel', 'target') THEN
        PERFORM alr._invalid(fn, pg_catalog.format(
          'steps[%s] must only have the keys delay, channel, target, got key %s', v_idx,
          -- A key is shown as a value is (alr._shown): a mistaken megabyte is not echoed whole.
          CASE WHEN pg_catalog.length(v_key) > 200
               THEN pg_catalog.format('%s... (%s characters)', pg_catalog.quote_literal(pg_catalog.left(v_key, 200)),
                                      pg_catalog.length(v_key))
               ELSE pg_catalog.quote_literal(v_key) END));
      END IF;
    END LOOP;
    v_delay := NULL;
    IF pg_catalog.jsonb_typeof(v_step -> 'delay') = 'string' THEN
      BEGIN
        v_delay := (v_step ->> 'delay')::interval;
      EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        v_delay := NULL;
      END;
    END IF;
    IF v_delay IS NULL OR v_delay < interval '0' THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].delay must be a non-negative interval, got %s',
        v_idx, COALESCE(alr._shown(v_step -> 'delay'), 'nothing')));
    END IF;
    -- A delay of mixed signs ('1 mon -29 days') adds to the clock as another span than it compares
    -- as; one over ten years would make start_escalation's next_at overflow (22008).
    PERFORM alr._check_span(fn, pg_catalog.format('steps[%s].delay', v_idx), v_delay);
    IF v_delay > interval '3650 days' THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].delay must be at most 3650 days, got %s', v_idx, v_delay));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'channel') = 'string' AND pg_catalog.length(v_step ->> 'channel') > 200 THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].channel must be at most 200 characters, got %s characters',
        v_idx, pg_catalog.length(v_step ->> 'channel')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'channel') IS DISTINCT FROM 'string'
       OR alr._is_blank(v_step ->> 'channel') THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].channel must be a non-empty string, got %s',
        v_idx, COALESCE(alr._shown(v_step -> 'channel'), 'nothing')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'target') = 'string' AND pg_catalog.length(v_step ->> 'target') > 1000 THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].target must be at most 1000 characters, got %s characters',
        v_idx, pg_catalog.length(v_step ->> 'target')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'target') IS DISTINCT FROM 'string'
       OR alr._is_blank(v_step ->> 'target') THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].target must be a non-empty string, got %s',
        v_idx, COALESCE(alr._shown(v_step -> 'target'), 'nothing')));
    END IF;
    v_delays := v_delays || v_delay;
    v_idx := v_idx + 1;
  END LOOP;

  INSERT INTO alr.escalation_policies (id, name) VALUES (v_id, create_policy.name);
  INSERT INTO alr.escalation_steps (policy_id, step_idx, delay, channel, target)
  SELECT v_id, (s.n - 1)::integer, v_delays[s.n], s.value ->> 'channel', s.value ->> 'target'
  FROM pg_catalog.jsonb_array_elements(steps) WITH ORDINALITY AS s(value, n);
  RETURN v_id;
END;
$$;
