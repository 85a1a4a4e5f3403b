-- What a queue table enforces on its writers, (re)applied by create_queue and by migration 00004 to
-- queues registered before it. Idempotent.
--  * CHECK constraints that name their rule: pgdrain_attempt_count_not_negative,
--    pgdrain_payload_not_json_null (outbox._payload_check), pgdrain_headers_string_object
--    (headers: NULL or an object of strings) and, for a string partition column,
--    pgdrain_partition_key_not_empty (not empty or blank): a plain INSERT is held to the rules
--    enqueue checks.
--    On an adopted table (p_adopted) they are NOT VALID (no scan of the history), and one that a
--    pending row already breaks is left out with a WARNING: a CHECK is tested on every UPDATE, so it
--    would make that row's claim fail forever. Pending rows are read once, through the claim index.
--  * pgdrain_producer (when the role exists) may INSERT only the event's columns (every column but
--    the ones that steer delivery: id, attempt_count, next_attempt_at, sent_at, leased_until,
--    lease_token, last_error), SELECT (id, event_id) for RETURNING, and use the id's sequence.
--  * The AFTER TRUNCATE trigger pgdrain_truncate (outbox.tg_queue__truncate), left as it is when in
--    place (outbox._trigger_in_place). Nothing here locks the table when nothing is missing.
CREATE OR REPLACE FUNCTION outbox._guard_queue_table(p_rel regclass, p_partition_column text,
                                                     p_adopted boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_check record;
  v_broken boolean;
  v_columns text;
  v_sequence text;
BEGIN
  -- A payload check made before 00025 reads the whole payload on every UPDATE: replaced, NOT VALID
  -- (no scan: the rows were checked by the old expression, which says the same).
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
             WHERE k.conrelid = p_rel AND k.conname = 'pgdrain_payload_not_json_null'
               AND pg_catalog.pg_get_constraintdef(k.oid) NOT LIKE '%pg_column_size%') THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT pgdrain_payload_not_json_null, '
                              'ADD CONSTRAINT pgdrain_payload_not_json_null CHECK (%s) NOT VALID',
                              p_rel, outbox._payload_check());
  END IF;
  FOR v_check IN
    SELECT c.name, c.expr
    FROM (VALUES ('pgdrain_attempt_count_not_negative', 'attempt_count >= 0'),
                 ('pgdrain_payload_not_json_null', outbox._payload_check()),
                 ('pgdrain_headers_string_object', 'headers IS NULL OR pg_catalog.jsonb_typeof(headers) = ''object'' '
                   || 'AND NOT pg_catalog.jsonb_path_exists(headers, ''$.* ? (@.type() != "string")'')')) AS c(name, expr)
    UNION ALL
    SELECT 'pgdrain_partition_key_not_empty', pg_catalog.format('pg_catalog.btrim(%I::text) <> ''''', p_partition_column)
    FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
    WHERE a.attrelid = p_rel AND a.attname = p_partition_column AND NOT a.attisdropped
      AND t.typcategory = 'S'
  LOOP
    CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                          WHERE k.conrelid = p_rel AND k.conname = v_check.name);
    IF p_adopted THEN
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND NOT (%s))',
                                p_rel, v_check.expr) INTO STRICT v_broken;
      IF v_broken THEN
        RAISE WARNING 'pgdrain: % not added to %: pending rows break it (it would make their claim fail); run create_queue again once they are delivered',
          v_check.name, p_rel;
        CONTINUE;
      END IF;
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%s)%s', p_rel, v_check.name,
                              v_check.expr, CASE WHEN p_adopted THEN ' NOT VALID' ELSE '' END);
  END LOOP;

  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'pgdrain_producer') THEN
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO v_columns
    FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = p_rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
      AND a.attname NOT IN ('id', 'attempt_count', 'next_attempt_at', 'sent_at', 'leased_until',
                            'lease_token', 'last_error');
    -- Revoking the table-level privilege also revokes every column-level one.
    EXECUTE pg_catalog.format('REVOKE INSERT ON %s FROM pgdrain_producer', p_rel);
    EXECUTE pg_catalog.format('GRANT INSERT (%s), SELECT (id, event_id) ON %s TO pgdrain_producer', v_columns, p_rel);
    v_sequence := COALESCE(outbox._id_sequence(p_rel)::text,
                           pg_catalog.pg_get_serial_sequence(p_rel::text, 'id'));
    IF v_sequence IS NOT NULL THEN
      EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %s TO pgdrain_producer', v_sequence);
    END IF;
  END IF;

  IF NOT outbox._trigger_in_place(p_rel, 'pgdrain_truncate', 'outbox.tg_queue__truncate()', 32, '{}') THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', p_rel);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__truncate()', p_rel);
  END IF;
END;
$$;
