-- +goose Up
-- +goose StatementBegin
-- The columns of queue table p_rel that pgdrain itself writes (create_queue adds them when they are
-- missing) as they must not be, each as "column what (needs what)", separated by commas; NULL when
-- there are none.
-- - A type other than the one its statements are built for: a claim's RETURN QUERY requires its
--   columns' exact types (attempt_count bigint: every claim failed with 42804), and a narrower
--   last_error (varchar(3)) refused every failure recorded: the row was delivered again and again,
--   never poisoned, and apply_results refused the whole batch's results with it.
-- - A default that makes a new row other than pending and free: sent_at's wrote every row as sent
--   (never delivered, counted nowhere), leased_until's or lease_token's as leased by nobody, and an
--   attempt_count that is not NOT NULL DEFAULT 0 as already tried (poisoned at max_attempts) or
--   NULL (no claim, stats or repair ever counts such a row).
-- The same types as pgdrain check's columns check.
CREATE OR REPLACE FUNCTION outbox._column_problems(p_rel regclass)
RETURNS text
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.string_agg(p.problem, ', ' ORDER BY p.n, p.kind)
  FROM (VALUES (1, 'attempt_count', 'integer'), (2, 'next_attempt_at', 'timestamp with time zone'),
               (3, 'sent_at', 'timestamp with time zone'), (4, 'leased_until', 'timestamp with time zone'),
               (5, 'lease_token', 'uuid'), (6, 'last_error', 'text'), (7, 'headers', 'jsonb')) AS r(n, col, typ)
  JOIN pg_catalog.pg_attribute a ON a.attrelid = p_rel AND a.attname = r.col AND NOT a.attisdropped
  LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  CROSS JOIN LATERAL (
    SELECT r.n, 1 AS kind, pg_catalog.format('%s %s (needs %s)', r.col, pg_catalog.format_type(a.atttypid, a.atttypmod), r.typ)
    WHERE pg_catalog.format_type(a.atttypid, a.atttypmod) <> r.typ
    UNION ALL
    SELECT r.n, 2, pg_catalog.format('%s DEFAULT %s (needs none: new rows would be written %s)', r.col,
                                     pg_catalog.pg_get_expr(d.adbin, d.adrelid),
                                     CASE r.col WHEN 'sent_at' THEN 'as sent, never delivered' ELSE 'as leased' END)
    WHERE r.col IN ('sent_at', 'leased_until', 'lease_token') AND d.adbin IS NOT NULL
    UNION ALL
    SELECT r.n, 2, pg_catalog.format('attempt_count %s%s (needs NOT NULL DEFAULT 0: %s)',
                                     CASE WHEN a.attnotnull THEN 'NOT NULL ' ELSE '' END,
                                     COALESCE('DEFAULT ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), 'without a default'),
                                     CASE WHEN NOT a.attnotnull THEN 'a row written with NULL attempts is taken by no claim'
                                          WHEN d.adbin IS NULL THEN 'enqueue and every producer that leaves it out fail'
                                          ELSE 'new rows would be written as tried already' END)
    WHERE r.col = 'attempt_count'
      AND NOT (a.attnotnull AND d.adbin IS NOT NULL AND pg_catalog.pg_get_expr(d.adbin, d.adrelid) = '0')) AS p(n, kind, problem)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Why row level security of table p_rel would filter what pgdrain's functions read, or NULL when it
-- does not. The functions are SECURITY DEFINER and run as p_definer (the owner of the outbox
-- functions); a policy applies to that role when the table has ROW LEVEL SECURITY enabled and either
-- forces it on its owner (FORCE ROW LEVEL SECURITY) or is owned by a role p_definer does not have
-- the privileges of, unless p_definer is a superuser or has BYPASSRLS. Such a policy is evaluated in
-- each caller's session (a drainer's settings, not a producer's): claims, results, stats, repair and
-- the commit step then see only the rows it shows them, and the others are never delivered and
-- counted nowhere.
CREATE OR REPLACE FUNCTION outbox._row_security_problem(p_rel regclass, p_definer oid)
RETURNS text
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.format(
    'has row level security that applies to %s, the role pgdrain''s functions run as (%s): claims, '
    'stats and repair would see only the rows its policies show the drainer''s session, and never '
    'deliver the others; pgdrain needs every row of a queue table',
    pg_catalog.pg_get_userbyid(p_definer),
    CASE WHEN c.relforcerowsecurity THEN 'FORCE ROW LEVEL SECURITY'
         ELSE pg_catalog.format('the table is owned by %s', pg_catalog.pg_get_userbyid(c.relowner)) END)
  FROM pg_catalog.pg_class c, pg_catalog.pg_roles r
  WHERE c.oid = p_rel AND r.oid = p_definer
    AND c.relrowsecurity AND NOT (r.rolsuper OR r.rolbypassrls)
    AND (c.relforcerowsecurity OR NOT pg_catalog.pg_has_role(p_definer, c.relowner, 'USAGE'))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Refuses, before anything changes, a caller of create_queue or set_notify whose objects the role
-- pgdrain's SECURITY DEFINER functions run as (the owner of the outbox functions) may not use: what
-- those calls make (the queue table, its sequences in outbox, its triggers' functions) is the
-- caller's, and with a superuser DBA beside a non-superuser migrating role (as docs/security.md
-- advises) every producer's INSERT and every claim of the queue failed with 42501 "permission
-- denied for sequence ...". 42501, naming the role to run the call as. Returns that owner (what
-- create_queue judges row level security for).
CREATE OR REPLACE FUNCTION outbox._check_caller(p_function text)
RETURNS oid
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_definer constant oid := (SELECT p.proowner FROM pg_catalog.pg_proc p
                             WHERE p.oid = 'outbox.claim_batch(text,integer,interval)'::pg_catalog.regprocedure);
BEGIN
  IF NOT pg_catalog.pg_has_role(v_definer, current_user, 'USAGE') THEN
    RAISE EXCEPTION '%: run it as the role pgdrain''s functions run as (%), got %: what it makes would be %''s, which % may not use (every producer and claim of the queue would fail with permission denied)',
      p_function, pg_catalog.pg_get_userbyid(v_definer), current_user, current_user, pg_catalog.pg_get_userbyid(v_definer)
      USING ERRCODE = '42501', HINT = pg_catalog.format('SET ROLE %I, then call %s again.', pg_catalog.pg_get_userbyid(v_definer), p_function);
  END IF;
  RETURN v_definer;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the TRUNCATE
-- trigger and either the NOTIFY trigger (unpartitioned) or the trigger that feeds the commit step
-- (partitioned, whose commit step notifies); then registers the queue. Idempotent: calling it
-- again with new settings updates them; the partition column can not change. An adopted table
-- keeps its rows; missing lease columns are added as NULL = "free", and those it has must be as
-- create_queue makes them (types and defaults: outbox._column_problems). What the table enforces
-- on producers (CHECKs, column privileges) is outbox._guard_queue_table. The caller must be a role
-- whose objects the functions' owner may use (outbox._check_caller), and the table's row level
-- security must not apply to that owner (outbox._row_security_problem).
-- Registration follows the table: when the registered table was dropped (or dropped and made
-- again) outside drop_queue, the new table is registered under the same queue_id and every piece
-- of state derived from the old one (partition heads, built-mark, clocks) is dropped first; heads
-- are then rebuilt from the new table's rows.
-- A partitioned queue needs the sequence its ids come from (outbox.queues.id_sequence): the commit
-- step renumbers late rows with it.
-- max_delay bounds every caller-chosen next attempt (enqueue's deliver_at, a worker's retry_at, a
-- plain INSERT of next_attempt_at: outbox._check_delay and the table's CHECK made by
-- outbox._guard_next_attempt_at), so nobody can park a key for ever.
-- A created table gets fillfactor 50, so writing a lease is a HOT update (no index touched): a row
-- is written twice, leased and then sent, and the sent version (which leaves the partial indexes)
-- also takes room on the page; at 80, 10-23% of the updates of a drain were HOT (of 50% possible),
-- at 50 47-48%, with a fifth less WAL and a table no larger after its drain. And autovacuum
-- settings for a table that is mostly empty and churns.
CREATE OR REPLACE FUNCTION outbox.create_queue(
  queue text,
  partition_column text DEFAULT NULL,
  max_attempts integer DEFAULT 10,
  backoff_min interval DEFAULT '1 second',
  backoff_max interval DEFAULT '30 seconds',
  permanent_policy text DEFAULT 'poison',
  channel text DEFAULT NULL,
  max_delay interval DEFAULT '7 days')
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'create_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_schema text := pg_catalog.split_part(v_name, '.', 1);
  v_table text := pg_catalog.split_part(v_name, '.', 2);
  v_col text := pg_catalog.lower(partition_column);
  -- The default channel names the table; one too long for a channel (63 characters) keeps its
  -- first 54 and a hash of the whole name.
  v_channel text := COALESCE(channel, CASE
    WHEN pg_catalog.length('pgdrain_' || v_schema || '_' || v_table) <= 63 THEN 'pgdrain_' || v_schema || '_' || v_table
    ELSE pg_catalog.left('pgdrain_' || v_schema || '_' || v_table, 54) || '_' || pg_catalog.left(pg_catalog.md5(v_name), 8) END);
  -- Index names: the table's, or for a table name over 40 characters its first 31 and a hash
  -- (two long names alike in their first 40 made one index name: 42P07 for the second queue).
  v_index_base text := CASE WHEN pg_catalog.length(v_table) <= 40 THEN v_table
    ELSE pg_catalog.left(v_table, 31) || '_' || pg_catalog.left(pg_catalog.md5(v_table), 8) END;
  v_rel regclass;
  v_old outbox.queues;
  v_type text;
  v_queue_id integer;
  v_missing text;
  v_has_nulls boolean;
  v_sequence regclass;
  v_other text;
  v_key_problem text;
  v_column_problem text;
  v_new_table boolean;
  v_created boolean := false;
  -- The role pgdrain's SECURITY DEFINER functions (claims, results, the producers' triggers) run
  -- as: the owner of the outbox functions, which must be able to use what this call makes and adopts.
  v_definer oid;
BEGIN
  IF partition_column IS NOT NULL AND partition_column !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must be a plain column name, got %L', partition_column));
  END IF;
  IF v_col IN ('id', 'event_type', 'payload', 'created_at', 'attempt_count', 'next_attempt_at',
               'sent_at', 'leased_until', 'lease_token', 'last_error', 'event_id', 'headers') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF v_col IN ('tableoid', 'xmin', 'cmin', 'xmax', 'cmax', 'ctid') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be a system column, got %L', partition_column));
  END IF;
  IF v_schema IN ('outbox', 'alr', 'core') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of pgdrain''s own schema %s, got %s', v_schema, v_name));
  END IF;
  IF v_schema = 'information_schema' OR v_schema LIKE E'pg\\_%' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of the system schema %s, got %s', v_schema, v_name));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  PERFORM outbox._check_span(fn, 'backoff_min', backoff_min);
  PERFORM outbox._check_span(fn, 'backoff_max', backoff_max);
  PERFORM outbox._check_span(fn, 'max_delay', max_delay);
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_min > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('backoff_min must be at most 1 day, got %s', backoff_min));
  END IF;
  IF backoff_max IS NULL OR backoff_max < backoff_min OR backoff_max > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_max must be between backoff_min (%s) and 1 day, got %s',
      backoff_min, COALESCE(backoff_max::text, 'NULL')));
  END IF;
  IF max_delay IS NULL OR max_delay < backoff_max OR max_delay > interval '3650 days' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_delay must be between backoff_max (%s) and 3650 days, got %s',
      backoff_max, COALESCE(max_delay::text, 'NULL')));
  END IF;
  IF permanent_policy IS NULL OR permanent_policy NOT IN ('poison', 'retry') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'permanent_policy must be ''poison'' or ''retry'', got %L', permanent_policy));
  END IF;
  IF permanent_policy = 'retry' AND v_col IS NOT NULL THEN
    PERFORM outbox._invalid(fn,
      'permanent_policy ''retry'' is not allowed with a partition_column: an event that can never '
      'apply would wedge its partition forever');
  END IF;
  IF v_channel !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'channel must be a plain name of at most 63 characters, got %L', v_channel));
  END IF;
  v_channel := pg_catalog.lower(v_channel);

  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = v_schema) THEN
    RAISE EXCEPTION '%: schema % does not exist', fn, v_schema USING ERRCODE = '3F000';
  END IF;
  v_rel := pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, v_table));
  -- What this call makes is the caller's: refused when the functions' owner may not use it.
  v_definer := outbox._check_caller(fn);

  -- The registration is this table's only while its oid is the table's; a registration whose
  -- table was dropped (and maybe made again) is stale, and the new table is a new queue.
  SELECT * INTO v_old FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF FOUND AND v_old.table_oid = v_rel AND v_old.partition_column IS DISTINCT FROM v_col THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column of registered queue %s is %s and can not change to %s (drop_queue first)',
      v_name, COALESCE(v_old.partition_column, 'NULL'), COALESCE(v_col, 'NULL')));
  END IF;
  -- The registered table renamed away, another made under the queue's name: its producers write
  -- rows the queue never reads, and the old table still holds the queue's. Refused before anything
  -- changes (its heads trigger kept the old one's function: "cannot drop function").
  IF v_old.queue_id IS NOT NULL AND v_old.table_oid IS DISTINCT FROM v_rel
     AND pg_catalog.pg_table_is_visible(v_old.table_oid) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is registered for table %s, which still exists (renamed?): rename it back to %s, or drop_queue(%L) first',
      v_name, v_old.table_oid::regclass, v_name, v_name));
  END IF;
  IF v_rel IS NOT NULL THEN
    SELECT q.queue INTO v_other FROM outbox.queues q WHERE q.table_oid = v_rel AND q.queue <> v_name;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'table %s is already registered as queue %s (renamed?); drop_queue(%L) first', v_name, v_other, v_other));
    END IF;
  END IF;
  v_new_table := v_old.queue_id IS NULL OR v_old.table_oid IS DISTINCT FROM v_rel;

  IF v_rel IS NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TABLE %I.%I (
         id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
         event_type text NOT NULL,
         payload jsonb NOT NULL,
         created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
         attempt_count integer NOT NULL DEFAULT 0,
         next_attempt_at timestamptz,
         sent_at timestamptz,
         leased_until timestamptz,
         lease_token uuid,
         last_error text,
         event_id uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
         headers jsonb%s
       ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
               autovacuum_vacuum_insert_scale_factor = 0.01)',
      v_schema, v_table,
      CASE WHEN v_col IS NULL THEN '' ELSE pg_catalog.format(', %I text NOT NULL', v_col) END);
    v_rel := pg_catalog.format('%I.%I', v_schema, v_table)::regclass;
    v_created := true;
  ELSE
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = v_rel) NOT IN ('r', 'p') THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but is not a table', v_name));
    END IF;
    -- A partition is delivered through its partitioned table, and an inheritance parent's
    -- statements read its children's rows too: claims would hand them out while their own heads,
    -- triggers and indexes are not pgdrain's.
    IF (SELECT c.relispartition FROM pg_catalog.pg_class c WHERE c.oid = v_rel) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s is a partition of %s: register the partitioned table instead', v_name,
        (SELECT i.inhparent::regclass FROM pg_catalog.pg_inherits i WHERE i.inhrelid = v_rel)));
    END IF;
    SELECT pg_catalog.string_agg(i.inhrelid::regclass::text, ', ' ORDER BY i.inhrelid) INTO v_other
    FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = v_rel AND NOT c.relispartition;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s must not have inheritance children (their rows would be claimed through it), got %s', v_name, v_other));
    END IF;
    -- Adopt: the columns the application already writes must be there with the right types.
    SELECT pg_catalog.string_agg(pg_catalog.format('%s %s', r.col, r.typ), ', ') INTO v_missing
    FROM (VALUES ('id', 'bigint'), ('event_type', 'text'), ('payload', 'jsonb'),
                 ('created_at', 'timestamp with time zone')) AS r(col, typ)
    WHERE NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = v_rel AND a.attname = r.col AND NOT a.attisdropped
        AND pg_catalog.format_type(a.atttypid, a.atttypmod) = r.typ);
    IF v_missing IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s exists but lacks required columns (or has other types): %s', v_name, v_missing));
    END IF;
    -- And the columns pgdrain writes, when the table has them, with the types its statements are
    -- built for and defaults that make a new row pending and free: refused for a new queue or a new
    -- table under a registered name; a registered queue's table keeps working as it does, with a
    -- warning (pgdrain check fails it).
    v_column_problem := outbox._column_problems(v_rel);
    IF v_column_problem IS NOT NULL AND v_new_table THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s exists but columns pgdrain writes are not as its statements need them: %s', v_name, v_column_problem));
    ELSIF v_column_problem IS NOT NULL THEN
      RAISE WARNING '%: columns of % are not as pgdrain''s statements need them: %', fn, v_name, v_column_problem
        USING HINT = 'Claims fail (SQLSTATE 42804), failures are not recorded or new rows are not pending while they are so: ALTER TABLE ... ALTER COLUMN ... TYPE, SET DEFAULT or DROP DEFAULT each (pgdrain check says how).';
    END IF;
    -- Row level security that applies to the functions' owner (FORCE ROW LEVEL SECURITY, or a
    -- table owned by a role it is not a member of) filters what every claim, result, stats and
    -- repair reads by the policy evaluated in the drainer's session: rows it hides were never
    -- delivered, counted nowhere (stats said 0 pending), and a claim that could not see a head's
    -- row dropped the head, so sessions that could see it no longer claimed it either.
    v_other := outbox._row_security_problem(v_rel, v_definer);
    IF v_other IS NOT NULL AND v_new_table THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but %s', v_name, v_other));
    ELSIF v_other IS NOT NULL THEN
      RAISE WARNING '%: queue % %', fn, v_name, v_other
        USING HINT = 'ALTER TABLE ... NO FORCE ROW LEVEL SECURITY (or DISABLE ROW LEVEL SECURITY); until then rows the policy hides from the drainers are not delivered.';
    END IF;
    v_other := NULL;
    IF NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_index i
      WHERE i.indrelid = v_rel AND i.indisprimary AND i.indnatts = 1
        AND i.indkey[0] = (SELECT a.attnum FROM pg_catalog.pg_attribute a
                           WHERE a.attrelid = v_rel AND a.attname = 'id')) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but id is not its primary key', v_name));
    END IF;
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row. Only
    -- when one is missing: ALTER TABLE locks the table even when it adds nothing, and create_queue
    -- run again on a registered queue (deploy scripts do) would hold up its producers and claims.
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = v_rel AND NOT a.attisdropped
          AND a.attname IN ('attempt_count', 'next_attempt_at', 'sent_at', 'leased_until', 'lease_token',
                            'last_error', 'headers')) < 7 THEN
      EXECUTE pg_catalog.format(
        'ALTER TABLE %s
           ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
           ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
           ADD COLUMN IF NOT EXISTS sent_at timestamptz,
           ADD COLUMN IF NOT EXISTS leased_until timestamptz,
           ADD COLUMN IF NOT EXISTS lease_token uuid,
           ADD COLUMN IF NOT EXISTS last_error text,
           ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    END IF;
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order. A column
      -- already NOT NULL (a registered queue's) is neither read nor altered.
      IF NOT (SELECT a.attnotnull FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col) THEN
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
          INTO STRICT v_has_nulls;
        IF v_has_nulls THEN
          PERFORM outbox._invalid(fn, pg_catalog.format(
            'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
        END IF;
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
      END IF;
    END IF;
  END IF;

  IF v_col IS NOT NULL THEN
    SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO v_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col;
    -- A column whose values do not have one text each can not key partitions: refused for a new
    -- queue, a new table under a registered name, and a new type of the column; the same table
    -- registered before 00044 with it (registered again, or after a restore) keeps working as
    -- before, with a warning (pgdrain check fails it).
    v_key_problem := outbox._key_type_problem(v_rel, v_col);
    IF v_key_problem IS NOT NULL AND (v_new_table OR v_old.partition_type IS DISTINCT FROM v_type) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('partition_column %s of %s can not key partitions: %s',
        v_col, v_name, v_key_problem));
    ELSIF v_key_problem IS NOT NULL THEN
      RAISE WARNING '%: partition_column % of % can not key partitions reliably: %', fn, v_col, v_name, v_key_problem
        USING HINT = 'Rows of one key can be delivered together or out of commit order; see docs/operations.md.';
    END IF;
  END IF;

  -- Renumbering late rows at commit (per-key commit order) takes new ids from this sequence.
  v_sequence := outbox._id_sequence(v_rel);
  IF v_col IS NOT NULL AND v_sequence IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is partitioned, so its id must come from an ascending sequence (identity, serial or '
      'DEFAULT nextval(''a_sequence'')): per-key commit order renumbers late rows with it', v_name));
  END IF;

  -- Everything derived from the old table goes before the new one is registered.
  IF v_old.queue_id IS NOT NULL AND v_new_table THEN
    DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_old.queue_id;
  END IF;

  -- clock_base: every id the sequence gave out so far counts as committed for per-key commit order
  -- (sessions with a cached sequence may still hand out smaller ones; their rows are then late).
  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base, max_delay)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0), create_queue.max_delay)
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence, max_delay = EXCLUDED.max_delay,
        clock_base = CASE WHEN q.table_oid = EXCLUDED.table_oid THEN q.clock_base ELSE EXCLUDED.clock_base END
  RETURNING q.queue_id INTO v_queue_id;

  -- A larger max_attempts does not make poisoned rows deliverable again: on a partitioned queue they
  -- would come back in front of what followed them in their keys (a 'register' after the
  -- 'unregister' delivered past it). They stay poisoned, at the new limit, until requeue_poisoned
  -- moves them to the tail of their keys. Read through the claim index (attempt_count, id).
  -- After the registration is written (its row locked until we commit): a transaction that
  -- poisoned rows at the old limit and is still open holds that row FOR SHARE
  -- (outbox._keep_poisoned), so the write above waited for it to commit and this statement sees
  -- its rows; one that poisons from now on waits for us, then lifts its rows itself.
  IF NOT v_new_table AND create_queue.max_attempts > v_old.max_attempts THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = $1, next_attempt_at = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $2 AND t.attempt_count < $1', v_rel)
      USING create_queue.max_attempts, v_old.max_attempts;
  END IF;

  -- A smaller max_attempts poisons pending rows between the two limits. A head parked on such a row
  -- (its backoff, up to max_delay) would hold its key's next rows until the backoff ended or the
  -- repair pass came, though they are deliverable now (invariant 9): those keys' heads are moved on
  -- here, past the newly poisoned rows. Read through the claim index (attempt_count, id).
  IF NOT v_new_table AND v_col IS NOT NULL AND create_queue.max_attempts < v_old.max_attempts THEN
    EXECUTE pg_catalog.format(
      'SELECT outbox._refresh_heads(q, ARRAY(
         SELECT DISTINCT t.%I::text FROM %s t
         WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND t.attempt_count < $2))
       FROM outbox.queues q WHERE q.queue_id = $3', v_col, v_rel)
      USING create_queue.max_attempts, v_old.max_attempts, v_queue_id;
  END IF;

  -- The two required indexes, unless an equivalent one (any name) is already there.
  IF v_col IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'partition') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (%I, id) WHERE sent_at IS NULL',
                              v_index_base || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              v_index_base || '_pgdrain_claim', v_rel);
  END IF;

  -- CHECKs, the producers' column privileges (plain INSERT of an event, RETURNING id; the heads
  -- trigger runs as owner) and the TRUNCATE trigger.
  PERFORM outbox._guard_queue_table(v_rel, v_col, NOT v_created);
  PERFORM outbox._guard_next_attempt_at(v_rel, create_queue.max_delay,
                                        v_new_table OR v_old.max_delay IS DISTINCT FROM create_queue.max_delay, v_created);

  -- The NOTIFY trigger wakes drainers of an unpartitioned queue; a partitioned queue's rows become
  -- claimable at commit, where its commit step notifies (outbox._commit_keys). Both as
  -- outbox.set_notify last said (a registration keeps it).
  PERFORM outbox._install_notify_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
  -- An unpartitioned queue has no heads triggers (nor its function); a partitioned one's are
  -- replaced in place (outbox._install_heads_trigger). Dropped only when there: DROP TRIGGER locks
  -- the table even when there is nothing to drop.
  IF v_col IS NULL THEN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
               WHERE t.tgrelid = v_rel AND t.tgname IN ('pgdrain_heads', 'pgdrain_snapshot', 'pgdrain_key_fixed')) THEN
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', v_rel);
    END IF;
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  END IF;
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    IF v_new_table THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The max_partitions partitions whose oldest pending row is older than older_than, oldest first,
-- with their head and why it is not moving. Reads outbox.partition_heads, so its cost follows the
-- number of partitions with pending work, not the backlog. A key whose head points at a row that is
-- gone is listed with its oldest pending row.
CREATE OR REPLACE FUNCTION outbox.wedged_partitions(queue text, older_than interval, max_partitions integer DEFAULT 10)
RETURNS TABLE(partition_key text, head_id bigint, head_attempt_count integer, head_last_error text,
              oldest_pending_at timestamptz, pending bigint, reason text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'wedged_partitions';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF v_q.partition_column IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('queue %s has no partition column', v_q.queue));
  END IF;
  PERFORM outbox._check_span(fn, 'older_than', older_than);
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  -- Further back than the clock can subtract (22008 from now() - older_than).
  IF older_than > interval '1000 years' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('older_than must be at most 1000 years, got %s', older_than));
  END IF;
  IF max_partitions IS NULL OR max_partitions < 1 OR max_partitions > 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_partitions must be between 1 and 10000, got %s', COALESCE(max_partitions::text, 'NULL')));
  END IF;
  -- A head whose row is gone (deleted by the application, or made sent by hand) is not moved by
  -- claims until its park ends or the repair pass finds it, and its key waits meanwhile: listed
  -- with the key's oldest pending row, and says so (an inner join on the head's row left out exactly
  -- that stuck key).
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT h.partition_key, COALESCE(t.id, f.id), COALESCE(t.attempt_count, f.attempt_count),
            CASE WHEN t.id IS NOT NULL THEN t.last_error ELSE f.last_error END, COALESCE(t.created_at, f.created_at),
            (SELECT pg_catalog.count(*) FROM %1$s p
             WHERE p.%2$I = h.partition_key::%3$s AND p.sent_at IS NULL AND p.attempt_count < $2),
            CASE
              WHEN t.id IS NULL THEN ''its head points at row '' || h.head_id
                   || '', which is gone or sent: the next claim to reach the head, or the repair pass (outbox.repair), moves it on''
              WHEN t.leased_until > pg_catalog.now() THEN ''leased until '' || t.leased_until
              WHEN t.next_attempt_at > pg_catalog.now() THEN ''backing off until '' || t.next_attempt_at
                   || '' after '' || t.attempt_count || '' attempts''
              ELSE ''ready, waiting for a drainer'' END
     FROM outbox.partition_heads h
     LEFT JOIN %1$s t ON t.id = h.head_id AND t.sent_at IS NULL
     LEFT JOIN LATERAL (SELECT p.id, p.attempt_count, p.last_error, p.created_at FROM %1$s p
                        WHERE t.id IS NULL AND h.head_id IS NOT NULL
                          AND p.%2$I = h.partition_key::%3$s AND p.sent_at IS NULL AND p.attempt_count < $2
                        ORDER BY p.id LIMIT 1) f ON true
     WHERE h.queue_id = $1 AND COALESCE(t.created_at, f.created_at) < pg_catalog.now() - $3
     ORDER BY COALESCE(t.created_at, f.created_at)
     LIMIT $4', v_q.table_oid::regclass, v_q.partition_column, v_q.partition_type)
    USING v_q.queue_id, v_q.max_attempts, older_than, max_partitions;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- When a queue's producers NOTIFY its channel:
--   'always': every insert of an unpartitioned queue, every commit that made a partition of a
--     partitioned queue claimable. Any LISTENing client is woken.
--   'when_waiting' (the default for queues created since 00024): only while a drainer waits for a
--     NOTIFY, which it says with outbox.drainer_waits
--     before it sleeps (and outbox.drainer_woke when a NOTIFY woke it). NOTIFY takes a cluster-wide
--     lock from commit until the commit's WAL flush is done, so concurrent producers that notify
--     commit one at a time; while the drainers are busy nobody needs one. The Go drainer does this
--     by itself; another client that only LISTENs is then woken only by its own polling.
-- Owner only, like create_queue (it replaces the queue's NOTIFY trigger). Idempotent; kept when
-- create_queue runs again.
CREATE OR REPLACE FUNCTION outbox.set_notify(queue text, notify text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  IF notify IS NULL OR notify NOT IN ('always', 'when_waiting') THEN
    RAISE EXCEPTION 'set_notify: notify must be ''always'' or ''when_waiting'', got %',
      COALESCE(pg_catalog.quote_literal(notify), 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('set_notify', queue);
  -- It makes the queue's sequences when they are missing: the caller's (outbox._check_caller).
  PERFORM outbox._check_caller('set_notify');
  UPDATE outbox.queues q SET notify = set_notify.notify WHERE q.queue_id = v_q.queue_id
  RETURNING q.* INTO v_q;
  PERFORM outbox._install_notify_trigger(v_q);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The version of the outbox schema installed in this database: the release it belongs to and the
-- number of the last migration applied (the file migrations/outbox/NNNNN_*.sql). A client that needs
-- a function added by migration N checks migration >= N before it starts (the Go drainer does).
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 52;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migrations 00002 and 00003 carry the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__truncate() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__notify() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_runs(text, integer, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked_runs(text, integer, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.queue_info(text) SECURITY DEFINER;
ALTER FUNCTION outbox.poisoned_rows(text, integer, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.release_lease(text, bigint, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;
ALTER FUNCTION outbox.heads_rebuild(text) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_waits(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_woke(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_turn(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.poison_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.retry_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.dismiss_poisoned(text, bigint[], text) SECURITY DEFINER;
ALTER FUNCTION outbox.operator_log(text, integer, bigint) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.claim_runs(text, integer, interval, integer),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.claim_locked_runs(text, integer, integer),
  outbox.settle_locked(text, bigint[], text[], text[], timestamptz[])
  TO pgdrain_worker;

-- Operators: read the state, give poisoned rows a fresh start, purge; list the registered queues.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.requeue_poisoned(text, bigint[]),
  outbox.purge_sent(text, interval, integer)
  TO pgdrain_operator;
GRANT SELECT ON outbox.queues TO pgdrain_operator;

-- Workers and operators: a queue's settings, when its next row is due (the drainer's sleep), and the
-- repair pass over its partition heads (the drainer runs it periodically; pgdrain check dry-runs it).
GRANT EXECUTE ON FUNCTION
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.repair(text, boolean)
  TO pgdrain_worker, pgdrain_operator;
-- Whether claims are rebuilding a queue's heads after a crash (00051): pgdrain check, the drainer's
-- gauges, the console.
GRANT EXECUTE ON FUNCTION outbox.heads_rebuild(text) TO pgdrain_worker, pgdrain_operator, pgdrain_reader;

-- Workers say when they wait for a NOTIFY of a queue that notifies 'when_waiting' (outbox.set_notify,
-- which like create_queue is granted to nobody), and take turns to claim while rows trickle in.
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint),
  outbox.claim_turn(text, interval)
  TO pgdrain_worker;

-- Workers also read what the Go drainer reports about its queue: the gauges (WithMetrics), wedged
-- partitions (WithWedgeObserver) and the index check at start. All read-only, no payloads.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text)
  TO pgdrain_worker;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.

-- Readers (the operator console's pages, dashboards): the gauges, wedged partitions, the index
-- check, the registered queues and the poisoned rows, never a payload unless granted on the table.
-- Operators read the same, and may end a stuck lease.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.poisoned_rows(text, integer, bigint)
  TO pgdrain_reader;
GRANT SELECT ON outbox.queues TO pgdrain_reader;
GRANT EXECUTE ON FUNCTION
  outbox.poisoned_rows(text, integer, bigint),
  outbox.release_lease(text, bigint, timestamptz)
  TO pgdrain_operator;

-- Operators act on rows that will not move on their own (00025): skip (poison with a reason), retry
-- now, dismiss poisoned rows; every action is fenced and logged, and the log is read by operators
-- and readers.
GRANT EXECUTE ON FUNCTION
  outbox.poison_row(text, bigint, integer, text),
  outbox.retry_row(text, bigint, integer, text),
  outbox.dismiss_poisoned(text, bigint[], text),
  outbox.operator_log(text, integer, bigint)
  TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION outbox.operator_log(text, integer, bigint) TO pgdrain_reader;

-- Everyone who may use the schema reads its version (outbox.version: a constant, no data): the Go
-- drainer checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION outbox.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP FUNCTION IF EXISTS outbox._column_problems(regclass);
DROP FUNCTION IF EXISTS outbox._row_security_problem(regclass, oid);
DROP FUNCTION IF EXISTS outbox._check_caller(text);
-- +goose StatementEnd


-- +goose StatementBegin
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the TRUNCATE
-- trigger and either the NOTIFY trigger (unpartitioned) or the trigger that feeds the commit step
-- (partitioned, whose commit step notifies); then registers the queue. Idempotent: calling it
-- again with new settings updates them; the partition column can not change. An adopted table keeps its rows; missing lease columns are added as
-- NULL = "free". What the table enforces on producers (CHECKs, column privileges) is
-- outbox._guard_queue_table.
-- Registration follows the table: when the registered table was dropped (or dropped and made
-- again) outside drop_queue, the new table is registered under the same queue_id and every piece
-- of state derived from the old one (partition heads, built-mark, clocks) is dropped first; heads
-- are then rebuilt from the new table's rows.
-- A partitioned queue needs the sequence its ids come from (outbox.queues.id_sequence): the commit
-- step renumbers late rows with it.
-- max_delay bounds every caller-chosen next attempt (enqueue's deliver_at, a worker's retry_at, a
-- plain INSERT of next_attempt_at: outbox._check_delay and the table's CHECK made by
-- outbox._guard_next_attempt_at), so nobody can park a key for ever.
-- A created table gets fillfactor 50, so writing a lease is a HOT update (no index touched): a row
-- is written twice, leased and then sent, and the sent version (which leaves the partial indexes)
-- also takes room on the page; at 80, 10-23% of the updates of a drain were HOT (of 50% possible),
-- at 50 47-48%, with a fifth less WAL and a table no larger after its drain. And autovacuum
-- settings for a table that is mostly empty and churns.
CREATE OR REPLACE FUNCTION outbox.create_queue(
  queue text,
  partition_column text DEFAULT NULL,
  max_attempts integer DEFAULT 10,
  backoff_min interval DEFAULT '1 second',
  backoff_max interval DEFAULT '30 seconds',
  permanent_policy text DEFAULT 'poison',
  channel text DEFAULT NULL,
  max_delay interval DEFAULT '7 days')
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'create_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_schema text := pg_catalog.split_part(v_name, '.', 1);
  v_table text := pg_catalog.split_part(v_name, '.', 2);
  v_col text := pg_catalog.lower(partition_column);
  -- The default channel names the table; one too long for a channel (63 characters) keeps its
  -- first 54 and a hash of the whole name.
  v_channel text := COALESCE(channel, CASE
    WHEN pg_catalog.length('pgdrain_' || v_schema || '_' || v_table) <= 63 THEN 'pgdrain_' || v_schema || '_' || v_table
    ELSE pg_catalog.left('pgdrain_' || v_schema || '_' || v_table, 54) || '_' || pg_catalog.left(pg_catalog.md5(v_name), 8) END);
  -- Index names: the table's, or for a table name over 40 characters its first 31 and a hash
  -- (two long names alike in their first 40 made one index name: 42P07 for the second queue).
  v_index_base text := CASE WHEN pg_catalog.length(v_table) <= 40 THEN v_table
    ELSE pg_catalog.left(v_table, 31) || '_' || pg_catalog.left(pg_catalog.md5(v_table), 8) END;
  v_rel regclass;
  v_old outbox.queues;
  v_type text;
  v_queue_id integer;
  v_missing text;
  v_has_nulls boolean;
  v_sequence regclass;
  v_other text;
  v_key_problem text;
  v_new_table boolean;
  v_created boolean := false;
BEGIN
  IF partition_column IS NOT NULL AND partition_column !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must be a plain column name, got %L', partition_column));
  END IF;
  IF v_col IN ('id', 'event_type', 'payload', 'created_at', 'attempt_count', 'next_attempt_at',
               'sent_at', 'leased_until', 'lease_token', 'last_error', 'event_id', 'headers') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF v_col IN ('tableoid', 'xmin', 'cmin', 'xmax', 'cmax', 'ctid') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be a system column, got %L', partition_column));
  END IF;
  IF v_schema IN ('outbox', 'alr', 'core') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of pgdrain''s own schema %s, got %s', v_schema, v_name));
  END IF;
  IF v_schema = 'information_schema' OR v_schema LIKE E'pg\\_%' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue must be a table of an application''s schema, not of the system schema %s, got %s', v_schema, v_name));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  PERFORM outbox._check_span(fn, 'backoff_min', backoff_min);
  PERFORM outbox._check_span(fn, 'backoff_max', backoff_max);
  PERFORM outbox._check_span(fn, 'max_delay', max_delay);
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_min > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('backoff_min must be at most 1 day, got %s', backoff_min));
  END IF;
  IF backoff_max IS NULL OR backoff_max < backoff_min OR backoff_max > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_max must be between backoff_min (%s) and 1 day, got %s',
      backoff_min, COALESCE(backoff_max::text, 'NULL')));
  END IF;
  IF max_delay IS NULL OR max_delay < backoff_max OR max_delay > interval '3650 days' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_delay must be between backoff_max (%s) and 3650 days, got %s',
      backoff_max, COALESCE(max_delay::text, 'NULL')));
  END IF;
  IF permanent_policy IS NULL OR permanent_policy NOT IN ('poison', 'retry') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'permanent_policy must be ''poison'' or ''retry'', got %L', permanent_policy));
  END IF;
  IF permanent_policy = 'retry' AND v_col IS NOT NULL THEN
    PERFORM outbox._invalid(fn,
      'permanent_policy ''retry'' is not allowed with a partition_column: an event that can never '
      'apply would wedge its partition forever');
  END IF;
  IF v_channel !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'channel must be a plain name of at most 63 characters, got %L', v_channel));
  END IF;
  v_channel := pg_catalog.lower(v_channel);

  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = v_schema) THEN
    RAISE EXCEPTION '%: schema % does not exist', fn, v_schema USING ERRCODE = '3F000';
  END IF;
  v_rel := pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, v_table));

  -- The registration is this table's only while its oid is the table's; a registration whose
  -- table was dropped (and maybe made again) is stale, and the new table is a new queue.
  SELECT * INTO v_old FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF FOUND AND v_old.table_oid = v_rel AND v_old.partition_column IS DISTINCT FROM v_col THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column of registered queue %s is %s and can not change to %s (drop_queue first)',
      v_name, COALESCE(v_old.partition_column, 'NULL'), COALESCE(v_col, 'NULL')));
  END IF;
  -- The registered table renamed away, another made under the queue's name: its producers write
  -- rows the queue never reads, and the old table still holds the queue's. Refused before anything
  -- changes (its heads trigger kept the old one's function: "cannot drop function").
  IF v_old.queue_id IS NOT NULL AND v_old.table_oid IS DISTINCT FROM v_rel
     AND pg_catalog.pg_table_is_visible(v_old.table_oid) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is registered for table %s, which still exists (renamed?): rename it back to %s, or drop_queue(%L) first',
      v_name, v_old.table_oid::regclass, v_name, v_name));
  END IF;
  IF v_rel IS NOT NULL THEN
    SELECT q.queue INTO v_other FROM outbox.queues q WHERE q.table_oid = v_rel AND q.queue <> v_name;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'table %s is already registered as queue %s (renamed?); drop_queue(%L) first', v_name, v_other, v_other));
    END IF;
  END IF;
  v_new_table := v_old.queue_id IS NULL OR v_old.table_oid IS DISTINCT FROM v_rel;

  IF v_rel IS NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TABLE %I.%I (
         id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
         event_type text NOT NULL,
         payload jsonb NOT NULL,
         created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
         attempt_count integer NOT NULL DEFAULT 0,
         next_attempt_at timestamptz,
         sent_at timestamptz,
         leased_until timestamptz,
         lease_token uuid,
         last_error text,
         event_id uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
         headers jsonb%s
       ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
               autovacuum_vacuum_insert_scale_factor = 0.01)',
      v_schema, v_table,
      CASE WHEN v_col IS NULL THEN '' ELSE pg_catalog.format(', %I text NOT NULL', v_col) END);
    v_rel := pg_catalog.format('%I.%I', v_schema, v_table)::regclass;
    v_created := true;
  ELSE
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = v_rel) NOT IN ('r', 'p') THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but is not a table', v_name));
    END IF;
    -- A partition is delivered through its partitioned table, and an inheritance parent's
    -- statements read its children's rows too: claims would hand them out while their own heads,
    -- triggers and indexes are not pgdrain's.
    IF (SELECT c.relispartition FROM pg_catalog.pg_class c WHERE c.oid = v_rel) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s is a partition of %s: register the partitioned table instead', v_name,
        (SELECT i.inhparent::regclass FROM pg_catalog.pg_inherits i WHERE i.inhrelid = v_rel)));
    END IF;
    SELECT pg_catalog.string_agg(i.inhrelid::regclass::text, ', ' ORDER BY i.inhrelid) INTO v_other
    FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = v_rel AND NOT c.relispartition;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s must not have inheritance children (their rows would be claimed through it), got %s', v_name, v_other));
    END IF;
    -- Adopt: the columns the application already writes must be there with the right types.
    SELECT pg_catalog.string_agg(pg_catalog.format('%s %s', r.col, r.typ), ', ') INTO v_missing
    FROM (VALUES ('id', 'bigint'), ('event_type', 'text'), ('payload', 'jsonb'),
                 ('created_at', 'timestamp with time zone')) AS r(col, typ)
    WHERE NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = v_rel AND a.attname = r.col AND NOT a.attisdropped
        AND pg_catalog.format_type(a.atttypid, a.atttypmod) = r.typ);
    IF v_missing IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s exists but lacks required columns (or has other types): %s', v_name, v_missing));
    END IF;
    IF NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_index i
      WHERE i.indrelid = v_rel AND i.indisprimary AND i.indnatts = 1
        AND i.indkey[0] = (SELECT a.attnum FROM pg_catalog.pg_attribute a
                           WHERE a.attrelid = v_rel AND a.attname = 'id')) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but id is not its primary key', v_name));
    END IF;
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row. Only
    -- when one is missing: ALTER TABLE locks the table even when it adds nothing, and create_queue
    -- run again on a registered queue (deploy scripts do) would hold up its producers and claims.
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = v_rel AND NOT a.attisdropped
          AND a.attname IN ('attempt_count', 'next_attempt_at', 'sent_at', 'leased_until', 'lease_token',
                            'last_error', 'headers')) < 7 THEN
      EXECUTE pg_catalog.format(
        'ALTER TABLE %s
           ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
           ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
           ADD COLUMN IF NOT EXISTS sent_at timestamptz,
           ADD COLUMN IF NOT EXISTS leased_until timestamptz,
           ADD COLUMN IF NOT EXISTS lease_token uuid,
           ADD COLUMN IF NOT EXISTS last_error text,
           ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    END IF;
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order. A column
      -- already NOT NULL (a registered queue's) is neither read nor altered.
      IF NOT (SELECT a.attnotnull FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col) THEN
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
          INTO STRICT v_has_nulls;
        IF v_has_nulls THEN
          PERFORM outbox._invalid(fn, pg_catalog.format(
            'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
        END IF;
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
      END IF;
    END IF;
  END IF;

  IF v_col IS NOT NULL THEN
    SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO v_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col;
    -- A column whose values do not have one text each can not key partitions: refused for a new
    -- queue, a new table under a registered name, and a new type of the column; the same table
    -- registered before 00044 with it (registered again, or after a restore) keeps working as
    -- before, with a warning (pgdrain check fails it).
    v_key_problem := outbox._key_type_problem(v_rel, v_col);
    IF v_key_problem IS NOT NULL AND (v_new_table OR v_old.partition_type IS DISTINCT FROM v_type) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('partition_column %s of %s can not key partitions: %s',
        v_col, v_name, v_key_problem));
    ELSIF v_key_problem IS NOT NULL THEN
      RAISE WARNING '%: partition_column % of % can not key partitions reliably: %', fn, v_col, v_name, v_key_problem
        USING HINT = 'Rows of one key can be delivered together or out of commit order; see docs/operations.md.';
    END IF;
  END IF;

  -- Renumbering late rows at commit (per-key commit order) takes new ids from this sequence.
  v_sequence := outbox._id_sequence(v_rel);
  IF v_col IS NOT NULL AND v_sequence IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is partitioned, so its id must come from an ascending sequence (identity, serial or '
      'DEFAULT nextval(''a_sequence'')): per-key commit order renumbers late rows with it', v_name));
  END IF;

  -- Everything derived from the old table goes before the new one is registered.
  IF v_old.queue_id IS NOT NULL AND v_new_table THEN
    DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_old.queue_id;
  END IF;

  -- clock_base: every id the sequence gave out so far counts as committed for per-key commit order
  -- (sessions with a cached sequence may still hand out smaller ones; their rows are then late).
  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base, max_delay)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0), create_queue.max_delay)
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence, max_delay = EXCLUDED.max_delay,
        clock_base = CASE WHEN q.table_oid = EXCLUDED.table_oid THEN q.clock_base ELSE EXCLUDED.clock_base END
  RETURNING q.queue_id INTO v_queue_id;

  -- A larger max_attempts does not make poisoned rows deliverable again: on a partitioned queue they
  -- would come back in front of what followed them in their keys (a 'register' after the
  -- 'unregister' delivered past it). They stay poisoned, at the new limit, until requeue_poisoned
  -- moves them to the tail of their keys. Read through the claim index (attempt_count, id).
  -- After the registration is written (its row locked until we commit): a transaction that
  -- poisoned rows at the old limit and is still open holds that row FOR SHARE
  -- (outbox._keep_poisoned), so the write above waited for it to commit and this statement sees
  -- its rows; one that poisons from now on waits for us, then lifts its rows itself.
  IF NOT v_new_table AND create_queue.max_attempts > v_old.max_attempts THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = $1, next_attempt_at = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $2 AND t.attempt_count < $1', v_rel)
      USING create_queue.max_attempts, v_old.max_attempts;
  END IF;

  -- A smaller max_attempts poisons pending rows between the two limits. A head parked on such a row
  -- (its backoff, up to max_delay) would hold its key's next rows until the backoff ended or the
  -- repair pass came, though they are deliverable now (invariant 9): those keys' heads are moved on
  -- here, past the newly poisoned rows. Read through the claim index (attempt_count, id).
  IF NOT v_new_table AND v_col IS NOT NULL AND create_queue.max_attempts < v_old.max_attempts THEN
    EXECUTE pg_catalog.format(
      'SELECT outbox._refresh_heads(q, ARRAY(
         SELECT DISTINCT t.%I::text FROM %s t
         WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND t.attempt_count < $2))
       FROM outbox.queues q WHERE q.queue_id = $3', v_col, v_rel)
      USING create_queue.max_attempts, v_old.max_attempts, v_queue_id;
  END IF;

  -- The two required indexes, unless an equivalent one (any name) is already there.
  IF v_col IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'partition') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (%I, id) WHERE sent_at IS NULL',
                              v_index_base || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              v_index_base || '_pgdrain_claim', v_rel);
  END IF;

  -- CHECKs, the producers' column privileges (plain INSERT of an event, RETURNING id; the heads
  -- trigger runs as owner) and the TRUNCATE trigger.
  PERFORM outbox._guard_queue_table(v_rel, v_col, NOT v_created);
  PERFORM outbox._guard_next_attempt_at(v_rel, create_queue.max_delay,
                                        v_new_table OR v_old.max_delay IS DISTINCT FROM create_queue.max_delay, v_created);

  -- The NOTIFY trigger wakes drainers of an unpartitioned queue; a partitioned queue's rows become
  -- claimable at commit, where its commit step notifies (outbox._commit_keys). Both as
  -- outbox.set_notify last said (a registration keeps it).
  PERFORM outbox._install_notify_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
  -- An unpartitioned queue has no heads triggers (nor its function); a partitioned one's are
  -- replaced in place (outbox._install_heads_trigger). Dropped only when there: DROP TRIGGER locks
  -- the table even when there is nothing to drop.
  IF v_col IS NULL THEN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
               WHERE t.tgrelid = v_rel AND t.tgname IN ('pgdrain_heads', 'pgdrain_snapshot', 'pgdrain_key_fixed')) THEN
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', v_rel);
    END IF;
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  END IF;
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    IF v_new_table THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The max_partitions partitions whose oldest pending row is older than older_than, oldest first,
-- with their head and why it is not moving. Reads outbox.partition_heads, so its cost follows the
-- number of partitions with pending work, not the backlog.
CREATE OR REPLACE FUNCTION outbox.wedged_partitions(queue text, older_than interval, max_partitions integer DEFAULT 10)
RETURNS TABLE(partition_key text, head_id bigint, head_attempt_count integer, head_last_error text,
              oldest_pending_at timestamptz, pending bigint, reason text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'wedged_partitions';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF v_q.partition_column IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('queue %s has no partition column', v_q.queue));
  END IF;
  PERFORM outbox._check_span(fn, 'older_than', older_than);
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  -- Further back than the clock can subtract (22008 from now() - older_than).
  IF older_than > interval '1000 years' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('older_than must be at most 1000 years, got %s', older_than));
  END IF;
  IF max_partitions IS NULL OR max_partitions < 1 OR max_partitions > 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_partitions must be between 1 and 10000, got %s', COALESCE(max_partitions::text, 'NULL')));
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT h.partition_key, t.id, t.attempt_count, t.last_error, t.created_at,
            (SELECT pg_catalog.count(*) FROM %1$s p WHERE p.%2$I = t.%2$I AND p.sent_at IS NULL AND p.attempt_count < $2),
            CASE
              WHEN t.leased_until > pg_catalog.now() THEN ''leased until '' || t.leased_until
              WHEN t.next_attempt_at > pg_catalog.now() THEN ''backing off until '' || t.next_attempt_at
                   || '' after '' || t.attempt_count || '' attempts''
              ELSE ''ready, waiting for a drainer'' END
     FROM outbox.partition_heads h
     JOIN %1$s t ON t.id = h.head_id
     WHERE h.queue_id = $1 AND t.created_at < pg_catalog.now() - $3
     ORDER BY t.created_at
     LIMIT $4', v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, older_than, max_partitions;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- When a queue's producers NOTIFY its channel:
--   'always': every insert of an unpartitioned queue, every commit that made a partition of a
--     partitioned queue claimable. Any LISTENing client is woken.
--   'when_waiting' (the default for queues created since 00024): only while a drainer waits for a
--     NOTIFY, which it says with outbox.drainer_waits
--     before it sleeps (and outbox.drainer_woke when a NOTIFY woke it). NOTIFY takes a cluster-wide
--     lock from commit until the commit's WAL flush is done, so concurrent producers that notify
--     commit one at a time; while the drainers are busy nobody needs one. The Go drainer does this
--     by itself; another client that only LISTENs is then woken only by its own polling.
-- Owner only, like create_queue (it replaces the queue's NOTIFY trigger). Idempotent; kept when
-- create_queue runs again.
CREATE OR REPLACE FUNCTION outbox.set_notify(queue text, notify text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  IF notify IS NULL OR notify NOT IN ('always', 'when_waiting') THEN
    RAISE EXCEPTION 'set_notify: notify must be ''always'' or ''when_waiting'', got %',
      COALESCE(pg_catalog.quote_literal(notify), 'NULL')
      USING ERRCODE = '22023';
  END IF;
  v_q := outbox._queue('set_notify', queue);
  UPDATE outbox.queues q SET notify = set_notify.notify WHERE q.queue_id = v_q.queue_id
  RETURNING q.* INTO v_q;
  PERFORM outbox._install_notify_trigger(v_q);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The version of the outbox schema installed in this database: the release it belongs to and the
-- number of the last migration applied (the file migrations/outbox/NNNNN_*.sql). A client that needs
-- a function added by migration N checks migration >= N before it starts (the Go drainer does).
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 51;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migrations 00002 and 00003 carry the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__truncate() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__notify() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_runs(text, integer, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked_runs(text, integer, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.queue_info(text) SECURITY DEFINER;
ALTER FUNCTION outbox.poisoned_rows(text, integer, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.release_lease(text, bigint, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;
ALTER FUNCTION outbox.heads_rebuild(text) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_waits(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_woke(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_turn(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.poison_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.retry_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.dismiss_poisoned(text, bigint[], text) SECURITY DEFINER;
ALTER FUNCTION outbox.operator_log(text, integer, bigint) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.claim_runs(text, integer, interval, integer),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.claim_locked_runs(text, integer, integer),
  outbox.settle_locked(text, bigint[], text[], text[], timestamptz[])
  TO pgdrain_worker;

-- Operators: read the state, give poisoned rows a fresh start, purge; list the registered queues.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.requeue_poisoned(text, bigint[]),
  outbox.purge_sent(text, interval, integer)
  TO pgdrain_operator;
GRANT SELECT ON outbox.queues TO pgdrain_operator;

-- Workers and operators: a queue's settings, when its next row is due (the drainer's sleep), and the
-- repair pass over its partition heads (the drainer runs it periodically; pgdrain check dry-runs it).
GRANT EXECUTE ON FUNCTION
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.repair(text, boolean)
  TO pgdrain_worker, pgdrain_operator;
-- Whether claims are rebuilding a queue's heads after a crash (00051): pgdrain check, the drainer's
-- gauges, the console.
GRANT EXECUTE ON FUNCTION outbox.heads_rebuild(text) TO pgdrain_worker, pgdrain_operator, pgdrain_reader;

-- Workers say when they wait for a NOTIFY of a queue that notifies 'when_waiting' (outbox.set_notify,
-- which like create_queue is granted to nobody), and take turns to claim while rows trickle in.
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint),
  outbox.claim_turn(text, interval)
  TO pgdrain_worker;

-- Workers also read what the Go drainer reports about its queue: the gauges (WithMetrics), wedged
-- partitions (WithWedgeObserver) and the index check at start. All read-only, no payloads.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text)
  TO pgdrain_worker;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.

-- Readers (the operator console's pages, dashboards): the gauges, wedged partitions, the index
-- check, the registered queues and the poisoned rows, never a payload unless granted on the table.
-- Operators read the same, and may end a stuck lease.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.poisoned_rows(text, integer, bigint)
  TO pgdrain_reader;
GRANT SELECT ON outbox.queues TO pgdrain_reader;
GRANT EXECUTE ON FUNCTION
  outbox.poisoned_rows(text, integer, bigint),
  outbox.release_lease(text, bigint, timestamptz)
  TO pgdrain_operator;

-- Operators act on rows that will not move on their own (00025): skip (poison with a reason), retry
-- now, dismiss poisoned rows; every action is fenced and logged, and the log is read by operators
-- and readers.
GRANT EXECUTE ON FUNCTION
  outbox.poison_row(text, bigint, integer, text),
  outbox.retry_row(text, bigint, integer, text),
  outbox.dismiss_poisoned(text, bigint[], text),
  outbox.operator_log(text, integer, bigint)
  TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION outbox.operator_log(text, integer, bigint) TO pgdrain_reader;

-- Everyone who may use the schema reads its version (outbox.version: a constant, no data): the Go
-- drainer checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION outbox.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd
