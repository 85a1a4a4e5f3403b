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
