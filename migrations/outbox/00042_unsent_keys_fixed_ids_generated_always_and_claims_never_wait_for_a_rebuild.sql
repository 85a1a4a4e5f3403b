-- +goose Up
-- +goose StatementBegin
-- Row-level AFTER UPDATE OF <partition column> trigger (pgdrain_key_fixed) of every partitioned
-- queue table, made by outbox._install_heads_trigger with a WHEN that lets it fire only for an
-- unsent row whose key changes: the partition key of an event not yet sent is fixed. Its place in
-- its key's order was set when its transaction committed (the key's head, floor and clock know it
-- under its key); moved to another key it had no head until the repair pass, and a row of the new
-- key written after it could be delivered before it. pgdrain's own statements never name the
-- column, so it never fires for them, nor for producers (they insert). A sent row's key may change.
-- Argument: the partition column's name.
CREATE OR REPLACE FUNCTION outbox.tg_queue__key_fixed()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- The queue's table, also when the row is in a partition of a table partitioned by range of id.
  RAISE EXCEPTION 'pgdrain: the partition key (column %) of event % of % can not change while it is not sent',
    TG_ARGV[0], OLD.id, COALESCE(pg_catalog.pg_partition_root(TG_RELID), TG_RELID::regclass)
    USING ERRCODE = '23514',
          HINT = 'Its place in its key''s order was fixed when it committed: write a new event for the other key.';
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether the queue table's id is GENERATED ALWAYS AS IDENTITY: such an id takes only DEFAULT in
-- an UPDATE, so renumbering (late rows, requeued rows) draws its new ids through the identity
-- (outbox._ids_by_default).
CREATE OR REPLACE FUNCTION outbox._id_generated_always(p_rel regclass)
RETURNS boolean
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                 WHERE a.attrelid = p_rel AND a.attname = 'id' AND a.attidentity = 'a');
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives the rows with the given ids (of a queue table whose id is GENERATED ALWAYS AS IDENTITY)
-- new ids from the identity, one row after the other in the given order, and returns them aligned
-- with p_ids. Such an id can only be written as DEFAULT (428C9 otherwise), and a DEFAULT in one
-- statement over many rows is drawn in whatever order the plan visits them: row by row keeps the
-- order, which is what renumbering is for. Only late rows and requeued rows of such tables come here.
CREATE OR REPLACE FUNCTION outbox._ids_by_default(p_rel regclass, p_ids bigint[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_update constant text := pg_catalog.format('UPDATE %s t SET id = DEFAULT WHERE t.id = $1 RETURNING t.id', p_rel);
  v_new bigint[] := '{}';
  v_id bigint;
BEGIN
  FOR i IN 1..COALESCE(pg_catalog.cardinality(p_ids), 0) LOOP
    EXECUTE v_update INTO v_id USING p_ids[i];
    v_new := v_new || v_id;
  END LOOP;
  RETURN v_new;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether trigger p_name of table p_rel is in place as pgdrain makes it: enabled, of type p_type
-- (pg_trigger.tgtype: 4 AFTER INSERT, 6 BEFORE INSERT, 32 AFTER TRUNCATE, each FOR EACH STATEMENT;
-- 17 AFTER UPDATE FOR EACH ROW),
-- firing p_function with exactly p_args, with a WHEN condition or not (p_when), and the transition
-- table p_new_table. create_queue run again leaves such a trigger as it is: dropping and making it
-- again takes the table's ACCESS EXCLUSIVE lock, which waits for every open lock-mode batch while
-- every producer and claim of the queue waits behind it.
CREATE OR REPLACE FUNCTION outbox._trigger_in_place(p_rel regclass, p_name text, p_function regprocedure,
                                                    p_type integer, p_args text[], p_when boolean DEFAULT false,
                                                    p_new_table text DEFAULT NULL)
RETURNS boolean
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_trigger t
    WHERE t.tgrelid = p_rel AND t.tgname = p_name AND NOT t.tgisinternal AND t.tgenabled = 'O'
      AND t.tgfoid = p_function AND t.tgtype = p_type AND t.tgnargs = pg_catalog.cardinality(p_args)
      AND t.tgargs = COALESCE(
            (SELECT pg_catalog.string_agg(pg_catalog.convert_to(u.a, pg_catalog.getdatabaseencoding()) || '\x00'::bytea,
                                          ''::bytea ORDER BY u.n)
             FROM pg_catalog.unnest(p_args) WITH ORDINALITY AS u(a, n)), ''::bytea)
      AND (t.tgqual IS NOT NULL) = p_when
      AND t.tgnewtable IS NOT DISTINCT FROM p_new_table::name);
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue its commit-step triggers:
-- - pgdrain_heads, a statement-level AFTER INSERT trigger running a function made for this queue,
--   outbox.tg_queue__heads_q<queue_id>, whose one statement names the partition column
--   statically, so PL/pgSQL plans it once per session instead of on every statement (a generic
--   function would need a dynamic EXECUTE). It notes the key and id of each new row for the commit
--   step, as outbox._note_written does; the first statement of a transaction, which inserts its
--   hook, inlined (one function call less on the usual transaction), later ones and SERIALIZABLE
--   transactions by calling it.
-- - pgdrain_snapshot, a statement-level BEFORE INSERT trigger that fires only in REPEATABLE READ
--   and SERIALIZABLE transactions (its WHEN costs a READ COMMITTED statement no function call):
--   outbox.tg_queue__snapshot_producer announces the transaction before it takes an id, so that
--   READ COMMITTED commit steps keep the clocks those transactions read (docs/ordering.md).
-- - pgdrain_key_fixed, a row-level AFTER UPDATE OF the partition column trigger that fires only
--   when an unsent row's key changes, and refuses it (outbox.tg_queue__key_fixed). AFTER, not
--   BEFORE: a table with any BEFORE UPDATE row trigger has every updated row locked first (a tuple
--   lock, WAL written) whether the trigger fires or not, and claims and results update every row
--   they take; an AFTER one costs a fetch of the old row.
-- And makes the function of the commit step's late-rows statement (outbox._late_rows_function).
-- Made again by every create_queue, so they always match the registration (nothing else
-- reinstalls the triggers: run create_queue again if one was dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write the notes.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  v_function constant text := 'outbox.' || pg_catalog.quote_ident('tg_queue__heads_q' || p_q.queue_id);
BEGIN
  EXECUTE pg_catalog.format(
    $f$CREATE OR REPLACE FUNCTION %1$s()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
DECLARE
  v_more boolean;
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- Noted in the hook, see outbox._note_written.
    PERFORM outbox._note_written(TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id))
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
    RETURN NULL;
  END IF;
  -- The transaction's first statement notes in its hook; later ones in outbox.commit_notes, the
  -- first of them marking the hook (true comes back only from that update; nothing from later ones).
  INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
  SELECT pg_catalog.pg_current_xact_id(), pg_catalog.array_agg(TG_RELID), pg_catalog.array_agg(n.%3$I::text),
         pg_catalog.array_agg(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.count(*) > 0
  ON CONFLICT (xid) DO UPDATE SET more_notes = true WHERE NOT h.more_notes
  RETURNING h.more_notes INTO v_more;
  IF v_more OR NOT FOUND THEN
    INSERT INTO outbox.commit_notes (table_oid, keys, ids)
    SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id)
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
  END IF;
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  -- Triggers in place are left as they are (the function above was replaced in place): dropping
  -- one locks the table (outbox._trigger_in_place).
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_heads', (v_function || '()')::regprocedure, 4, '{}',
                                  false, 'pgdrain_new_rows') THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
         FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
  END IF;
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_snapshot', 'outbox.tg_queue__snapshot_producer()', 6,
                                  ARRAY[outbox._snapshot_lock_class()::text, p_q.queue_id::text], true) THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      $f$CREATE TRIGGER pgdrain_snapshot BEFORE INSERT ON %s FOR EACH STATEMENT
         WHEN (pg_catalog.current_setting('transaction_isolation') <> 'read committed')
         EXECUTE FUNCTION outbox.tg_queue__snapshot_producer(%s, %s)$f$,
      p_q.table_oid::regclass, outbox._snapshot_lock_class(), p_q.queue_id);
  END IF;
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_key_fixed', 'outbox.tg_queue__key_fixed()', 17,
                                  ARRAY[p_q.partition_column], true) THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_key_fixed AFTER UPDATE OF %1$I ON %2$s FOR EACH ROW
         WHEN (OLD.sent_at IS NULL AND OLD.%1$I IS DISTINCT FROM NEW.%1$I)
         EXECUTE FUNCTION outbox.tg_queue__key_fixed(%3$L)',
      p_q.partition_column, p_q.table_oid::regclass, p_q.partition_column);
  END IF;
  -- The commit step's late-rows statement, made now rather than by a producer's commit, and made
  -- again in place: its name says the table and column it reads, not the statement, so a migration
  -- that changes the statement (and reinstalls these triggers, as migrations do) replaces it here.
  PERFORM outbox._late_rows_function(p_q, true);
END;
$$;
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
  IF v_schema = 'information_schema' OR v_schema LIKE 'pg\_%' THEN
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
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark,
-- clocks, claim hints, statements with kept plans and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_q outbox.queues;
  v_rel regclass;
BEGIN
  -- Not outbox._queue: that refuses a registration whose table is gone, which is what this clears.
  SELECT * INTO v_q FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', fn, v_name
      USING ERRCODE = '42P01';
  END IF;
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  IF pg_catalog.pg_table_is_visible(v_q.table_oid) IS NOT NULL THEN
    v_rel := v_q.table_oid::regclass;
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF v_rel IS NULL THEN
    NULL;
  ELSIF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_rel);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
  -- Its drainers' waiting mark (outbox._install_notify_trigger).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'drainer_waits_q' || v_q.queue_id);
  -- Its drainers' claim turn (outbox.claim_turn).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_turn_q' || v_q.queue_id);
  -- Its kept statements (outbox._prepared) and late-rows function (outbox._late_rows_function).
  PERFORM outbox._drop_functions('^_q' || v_q.queue_id || '_');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables, or recomputes them (_rebuild_heads): every partition with
-- pending rows gets its head again, searched from floor 0.
-- Heads producers made since then are kept (upsert). Runs once per queue: the first claim takes
-- the queue's rebuild lock, looks again, and rebuilds; concurrent claims do not wait for it
-- (outbox._claim tries the lock), other callers (_rebuild_heads) do. A rebuild NOTIFYs the queue's
-- channel: drainers whose claims found the heads incomplete meanwhile claim again at its commit.
CREATE OR REPLACE FUNCTION outbox._restore_heads(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_keys text[];
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -1);
  IF EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    RETURN;
  END IF;
  -- Keys with deliverable rows, and keys that have a head (a rebuild keeps heads: the search from
  -- floor 0 below repoints or, under the producer lock, drops them).
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k) FROM (
       SELECT %I::text AS k FROM %s WHERE sent_at IS NULL AND attempt_count < $1
       UNION
       SELECT h.partition_key FROM outbox.partition_heads h WHERE h.queue_id = $2) s',
    p_q.partition_column, p_q.table_oid::regclass)
    INTO v_keys USING p_q.max_attempts, p_q.queue_id;
  UPDATE outbox.partition_heads h SET floor_id = 0 WHERE h.queue_id = p_q.queue_id;
  PERFORM outbox._refresh_heads(p_q, v_keys);
  INSERT INTO outbox.partition_heads_built (queue_id) VALUES (p_q.queue_id) ON CONFLICT DO NOTHING;
  IF v_keys IS NOT NULL AND pg_catalog.current_setting('pgdrain.notify', true) IS DISTINCT FROM 'off' THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The claim behind claim_batch (mode 'lease', partitioned queues; claim_batch leases unpartitioned
-- rows in one statement of its own) and claim_locked (mode 'lock'). Returns the ids of the claimed
-- rows; the caller reads them back. Deliverable = unsent, not poisoned, due, lease free or expired,
-- and on a partitioned queue the first deliverable row of its partition.
--
-- Partitioned queues claim through outbox.partition_heads (one row per partition with pending
-- work), never through the pending rows themselves, so blocked successors, heads in backoff and
-- poisoned rows cost nothing: a head backing off is "parked" until its time and woken (at most a
-- bounded number per call) when that time has come; a head whose row is leased stays ready and is
-- passed over with one probe. Heads are locked FOR NO KEY UPDATE SKIP LOCKED, which concurrent
-- claimers skip and producers (who hold only advisory locks) do not wait for. Each candidate is
-- still checked against the FIFO rule on the queue table, from the partition's floor (below it
-- every row is sent or poisoned), so poisoned rows in front of a head are not walked again.
--
-- p_run > 1 (claim_batch's and claim_locked's run_length): with each head claimed, the rows that
-- follow it in its partition (outbox._claim_run), up to p_run per partition and p_batch_size in
-- all, so that a partition's run costs one head search and, recorded together, one head write.
CREATE OR REPLACE FUNCTION outbox._claim(p_q outbox.queues, p_batch_size integer, p_lease interval, p_mode text,
                                         p_run integer)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table regclass := p_q.table_oid::regclass;
  -- Due and lease times against the clock, not now(): a claim in a transaction that began long ago
  -- must neither miss what has become due since nor hand out a lease that has already run out.
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_due constant text := 't.sent_at IS NULL AND t.attempt_count < $2
    AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= $now)
    AND (t.leased_until IS NULL OR t.leased_until <= $now)';
  v_all bigint[] := '{}';
  v_ids bigint[];
  v_keys text[];
  v_heads bigint[];
  v_floors bigint[];
  v_claimed_keys text[];
  v_stale text[];
  v_remaining integer := p_batch_size;
  v_until timestamptz;
  -- Where this session's last claim of this queue stopped among fresh heads (attempt_count 0), in
  -- head_id order, and when that run of claims started from the front (epoch seconds). Heads a claim
  -- or result moved on leave dead index entries in front of the live ones until vacuum removes them,
  -- which it can not while another session holds the xmin horizon: starting past them keeps a claim
  -- from walking the whole drain's history. A per-session hint only: a claim that finds fewer heads
  -- past it than it wants goes on from the front, and a cursor older than a second is not used.
  -- Heads behind every cursor (a lease that ran out, a row given back, a claim rolled back) are
  -- reached by the one claim per second per queue that searches from the front (the queue's shared
  -- hints, below); a session without a cursor starts where that search stopped. Retried heads
  -- (attempt_count > 0) are always searched from the front, after the fresh ones.
  v_cursor constant text := 'pgdrain.claim_cursor_' || p_q.queue_id;
  v_cursor_value constant text[] := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_cursor, true), ''), ',');
  v_run_started double precision := CASE
    WHEN v_cursor_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_cursor_value[2]::double precision END;
  v_from_head bigint := CASE WHEN v_run_started IS NOT NULL THEN v_cursor_value[1]::bigint END;
  v_last_fresh bigint;
  v_front_duty boolean := false;
  v_only_fresh boolean;
  -- The queue's shared hints (outbox._install_claim_hints); NULL when the queue has none.
  v_start constant regclass := pg_catalog.to_regclass('outbox.claim_start_q' || p_q.queue_id);
  v_front_hint constant regclass := pg_catalog.to_regclass('outbox.claim_front_q' || p_q.queue_id);
  v_now_ms constant bigint := (pg_catalog.date_part('epoch', v_now) * 1000)::bigint;
  v_front_ms bigint;
  v_seen text[] := '{}';
  -- A head whose row is in flight (leased, the lease running) is passed over without a lock: a
  -- claim that locked it would hold it until its commit (its WAL flush), and the result that moves
  -- the head on would wait for that.
  v_not_in_flight constant text := pg_catalog.format(
    'NOT EXISTS (SELECT 1 FROM %s t WHERE t.id = h.head_id AND t.leased_until > $5)', v_table);
  -- Where a search stopped is the largest head id it saw, as its snapshot saw it. A head that a
  -- result moved on after the search's snapshot was taken comes back locked in its new version
  -- (READ COMMITTED re-reads a row it locks), with the id of its key's next row, as far ahead as
  -- that row is: taken as the stop, it sent every replica's next claim past the queue's last head
  -- and on to the front (about half the claims of 4 replicas searched the front again). A version
  -- the statement's snapshot does not see is such a head, and is left out of the stop (our own
  -- transaction's writes are seen, though its xid may be past the snapshot's xmax).
  v_seen_by_search constant text :=
    '(s.written_by = (SELECT pg_catalog.xid(pg_catalog.pg_current_xact_id_if_assigned()))
      OR pg_catalog.age(s.written_by) > (SELECT pg_catalog.age(pg_catalog.xid(pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()))))
         AND s.written_by <> ALL (ARRAY(SELECT pg_catalog.xid(pg_catalog.pg_snapshot_xip(pg_catalog.pg_current_snapshot())))))';
  v_busy text[];
  v_front boolean;
  v_asked integer;
  v_run_ids bigint[];
  -- Rows a claimed head brings with it (itself included): how many heads to ask for. Starts from
  -- what this session's claims of the queue learnt (a per-session hint, like the cursor): starting
  -- every claim from p_run asked for too few heads whenever runs are shorter, and every claim then
  -- searched, leased and extended runs twice. A pass with budget left over measures the rows per
  -- head; one that the batch cut short only says they are at least that many, and keeps the larger
  -- estimate. An estimate older than a second is not used, so longer runs are found again (that
  -- claim may take two passes).
  v_run_hint constant text := 'pgdrain.run_rows_' || p_q.queue_id;
  v_run_hint_value constant text[] := CASE WHEN p_run > 1 THEN pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_run_hint, true), ''), ',') END;
  v_run_hint_since double precision := CASE
    WHEN v_run_hint_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_run_hint_value[2]::double precision END;
  v_rows_per_head numeric := CASE WHEN p_run <= 1 THEN 1
    WHEN v_run_hint_since IS NULL THEN p_run
    ELSE LEAST(p_run, GREATEST(1, v_run_hint_value[1]::numeric)) END;
  v_seen_per_head numeric;
  -- Lock mode: rows this transaction already holds from an earlier claim_locked. SKIP LOCKED does
  -- not skip our own locks, so without excluding them before the LIMIT they would take the places
  -- of rows that can still be claimed.
  v_held bigint[] := CASE WHEN p_mode = 'lock' THEN COALESCE(pg_catalog.string_to_array(NULLIF(
    pg_catalog.current_setting('pgdrain.held_' || p_q.queue_id, true), ''), ',')::bigint[], '{}') ELSE '{}' END;
BEGIN
  IF p_q.partition_column IS NULL THEN  -- lock mode only (see above)
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s AND t.id <> ALL ($4)
         ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, pg_catalog.replace(v_due, '$now', '$3')),
      'integer, integer, timestamptz, bigint[]', 'TABLE(pgdrain_ids bigint[])')
      INTO v_all USING p_batch_size, p_q.max_attempts, v_now, v_held;
    RETURN COALESCE(v_all, '{}');
  END IF;

  -- Heads not built (after a crash): the first claim rebuilds them. Another claim's transaction
  -- rebuilding them now holds the rebuild lock until it ends, a whole lock-mode batch: not waited
  -- for. This claim takes what the heads there are offer (each is checked against the FIFO rule from
  -- its floor, so a partial set is only incomplete), and the rebuilder's commit wakes the drainers.
  -- (Two IFs: the lock is tried only when the heads are not built, never by the usual claim.)
  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    IF pg_catalog.pg_try_advisory_xact_lock(1885823232 + p_q.queue_id, -1) THEN
      PERFORM outbox._restore_heads(p_q);
    END IF;
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now. Its first statement (a SERIALIZABLE transaction: every one)
  -- noted them in its hook (outbox._note_written).
  -- (A transaction that has written nothing has no xid, and looks no further.)
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL
     AND (EXISTS (SELECT 1 FROM outbox.commit_notes n
                  WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = p_q.table_oid)
          OR EXISTS (SELECT 1 FROM outbox.commit_hooks h
                     WHERE h.xid = pg_catalog.pg_current_xact_id() AND p_q.table_oid = ANY (h.table_oids))) THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY(
      SELECT DISTINCT u.k FROM outbox.commit_notes n CROSS JOIN LATERAL pg_catalog.unnest(n.keys) AS u(k)
      WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = p_q.table_oid
      UNION
      SELECT u.k FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids, h.keys) AS u(table_oid, k)
      WHERE h.xid = pg_catalog.pg_current_xact_id() AND u.table_oid = p_q.table_oid));
  END IF;

  -- What producers could not write to heads a claim held while they committed.
  IF EXISTS (SELECT 1 FROM outbox.partition_wakes w WHERE w.queue_id = p_q.queue_id) THEN
    PERFORM outbox._apply_wakes(p_q);
  END IF;

  -- Wake parked heads whose lease or backoff has ended, oldest first, a bounded number per call.
  -- By ctid: a TID scan touches exactly these heads whatever the statistics say.
  UPDATE outbox.partition_heads h SET parked_until = NULL
  WHERE h.ctid = ANY (ARRAY(
    SELECT w.ctid FROM outbox.partition_heads w
    WHERE w.queue_id = p_q.queue_id AND w.parked_until <= v_now
    ORDER BY w.parked_until
    LIMIT GREATEST(4 * p_batch_size, 64)
    FOR NO KEY UPDATE SKIP LOCKED));

  -- No cursor of this session's own (a new session, or its run started over a second ago): only one
  -- claim per second per queue searches from the front, the one that finds the last search a second
  -- old, and leaves where it stopped as the queue's start; the others start there, past the dead
  -- entries the drain left in front (which a held xmin keeps), and their run is as old as that search.
  IF v_from_head IS NULL AND v_front_hint IS NOT NULL AND v_start IS NOT NULL THEN
    v_front_ms := pg_catalog.pg_sequence_last_value(v_front_hint);
    IF v_front_ms > v_now_ms - 1000 AND v_front_ms <= v_now_ms THEN
      v_from_head := pg_catalog.pg_sequence_last_value(v_start);
      v_run_started := v_front_ms / 1000.0;
    ELSE
      PERFORM pg_catalog.setval(v_front_hint, v_now_ms);
      v_front_duty := true;
    END IF;
  END IF;

  -- Lease mode: a cursor of this session's own goes on from where any claim of the queue last
  -- stopped among fresh heads, if that is further. The heads between were leased by other sessions
  -- (replicas): walking them cost each of four replicas the other three's claims (sampled claims in
  -- a 4-replica drain read 3-4x the buffers of a claim at rest; 1x with this). Not in lock mode,
  -- where it measured slower: a head another batch holds is skipped by its lock, and jumping past
  -- heads that batch then hands back sends more claims to the front.
  IF p_mode = 'lease' AND v_from_head IS NOT NULL AND v_start IS NOT NULL THEN
    v_from_head := GREATEST(v_from_head, pg_catalog.pg_sequence_last_value(v_start));
  END IF;

  FOR pass IN 1..4 LOOP
    v_front := v_from_head IS NULL;
    v_asked := pg_catalog.ceil(v_remaining / v_rows_per_head)::integer;
    IF NOT v_front THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE %s)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.xmin AS written_by FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 AND h.attempt_count = 0 AND h.head_id > $2
                 AND h.head_id <> ALL ($3) AND h.partition_key <> ALL ($4)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $6
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, v_not_in_flight),
        'integer, bigint, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint)')
        INTO v_keys, v_heads, v_floors, v_last_fresh
        USING p_q.queue_id, v_from_head, v_all || v_held, v_seen, v_now, v_asked;
      -- Too few past the cursor: the next pass goes on from the front; otherwise past these heads
      -- (a head in flight is not walked again by every pass).
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_asked THEN
        v_from_head := NULL;
      ELSE
        v_from_head := COALESCE(v_last_fresh, v_from_head);
      END IF;
    ELSE
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0 AND %s),
                pg_catalog.bool_and(s.attempt_count = 0)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count, h.xmin AS written_by
               FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
                 -- locks: without this a later pass would take them again.
                 AND (h.head_id IS NULL OR h.head_id <> ALL ($2))
                 AND h.partition_key <> ALL ($3)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $5
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, pg_catalog.replace(v_not_in_flight, '$5', '$4')),
        'integer, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint, pgdrain_only_fresh boolean)')
        INTO v_keys, v_heads, v_floors, v_last_fresh, v_only_fresh
        USING p_q.queue_id, v_all || v_held, v_seen, v_now, v_asked;
      v_run_started := pg_catalog.date_part('epoch', v_now);
      -- As many fresh heads as asked for: the next pass goes on past them as from a cursor.
      IF v_only_fresh AND pg_catalog.cardinality(v_keys) = v_asked THEN
        v_from_head := v_last_fresh;
      END IF;
    END IF;
    IF v_keys IS NULL THEN
      EXIT WHEN v_front;
      CONTINUE;
    END IF;
    IF v_last_fresh IS NOT NULL THEN
      -- As numeric: a double's text follows the caller's extra_float_digits (at -15 the time read
      -- 2e+09, a cursor that never aged, and heads behind it waited for another session's claim).
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started::numeric, false);
      -- Every search past the start moves it on, in both modes: a session without a cursor of its
      -- own then starts past the heads just taken. Lock mode left it to the search from the front,
      -- and such a claim walked every head moved in up to a second (3-6x a claim at rest in
      -- 4-replica drains).
      IF v_front_duty AND v_front THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      ELSIF NOT v_front AND v_start IS NOT NULL
            AND v_last_fresh > COALESCE(pg_catalog.pg_sequence_last_value(v_start), 0) THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      END IF;
    END IF;

    -- Lease mode leases what it locks in the same statement (one statement planned, not two).
    v_until := pg_catalog.clock_timestamp() + p_lease;
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH picked AS (
         SELECT t.id, t.%2$I AS key, t.ctid AS version, t.tableoid AS version_table
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS c(id, floor_id, key)
         -- A head must point at a row of its own partition (heads of new keys come from settings a
         -- producer could forge); one that does not is stale and refreshed below.
         JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%4$s
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           -- A floor at the head itself (a head a result moved on, the usual one) leaves no row
           -- below it to look for: no probe.
           AND (c.floor_id >= t.id
                OR NOT EXISTS (SELECT 1 FROM %1$s p
                               WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                                 AND p.sent_at IS NULL AND p.attempt_count < $2
                               OFFSET 0))
         FOR UPDATE OF t SKIP LOCKED),
       claimed AS (%5$s)
       SELECT pg_catalog.array_agg(claimed.id), pg_catalog.array_agg(claimed.key::text) FROM claimed',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type,
      CASE WHEN p_mode = 'lease'
           THEN pg_catalog.format(
             -- By the version picked locked (a TID scan), not by id: a second index probe per row.
             -- A version newer than the statement's snapshot (a concurrent release committed
             -- between the snapshot and the lock) is not leased; its head counts as stale below.
             -- With its table: a ctid names a row only within one table, and a queue table
             -- partitioned by range has one per partition (each with its own (0,1)).
             'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $6
              FROM picked WHERE u.ctid = picked.version AND u.tableoid = picked.version_table
              RETURNING u.id, picked.key', v_table)
           ELSE 'SELECT picked.id, picked.key FROM picked' END),
      'bigint[], integer, bigint[], text[], timestamptz, timestamptz', 'TABLE(pgdrain_ids bigint[], pgdrain_keys text[])')
      INTO v_ids, v_claimed_keys USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now, v_until;

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_run > 1 AND v_remaining > 0 THEN
        v_run_ids := outbox._claim_run(p_q, v_ids, v_claimed_keys, p_run - 1, v_remaining, v_now, v_until, p_mode);
        v_all := v_all || v_run_ids;
        v_remaining := v_remaining - pg_catalog.cardinality(v_run_ids);
        v_seen_per_head := (pg_catalog.cardinality(v_ids) + pg_catalog.cardinality(v_run_ids))::numeric
                           / pg_catalog.cardinality(v_ids);
        v_rows_per_head := LEAST(p_run, GREATEST(1, CASE WHEN v_remaining > 0 THEN v_seen_per_head
                                                         ELSE GREATEST(v_seen_per_head, v_rows_per_head) END));
        v_run_hint_since := COALESCE(v_run_hint_since, pg_catalog.date_part('epoch', v_now));
        PERFORM pg_catalog.set_config(v_run_hint,
          pg_catalog.round(v_rows_per_head, 2) || ',' || v_run_hint_since::numeric, false);
      END IF;
    END IF;

    -- Heads not claimed are in flight (their row is leased right now: nothing to refresh, their
    -- result moves them on, and an expired lease makes the row claimable again through the same
    -- head; this call looks at them no more) or stale: pointing at a row that is no longer (or not
    -- yet) the partition's deliverable head, refreshed here.
    -- NOT IN a subquery: a hashed subplan, linear in the keys (<> ALL compared every key with every
    -- claimed one: 0.7 ms per claim of 256 rows, 10 ms of 1,000).
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k NOT IN (SELECT c FROM pg_catalog.unnest(v_claimed_keys) AS c);
    v_busy := NULL;
    IF v_stale IS NOT NULL THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NULL),
                pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NOT NULL)
         FROM unnest($1::bigint[], $2::text[]) AS c(id, key)
         LEFT JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%3$s AND t.sent_at IS NULL
           AND t.attempt_count < $4 AND t.leased_until > $5
           AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= t.leased_until)
         WHERE c.key = ANY ($3)',
        v_table, p_q.partition_column, p_q.partition_type),
        'bigint[], text[], text[], integer, timestamptz', 'TABLE(pgdrain_stale text[], pgdrain_busy text[])')
        INTO v_stale, v_busy USING v_heads, v_keys, v_stale, p_q.max_attempts, v_now;
      v_seen := v_seen || COALESCE(v_busy, '{}');
    END IF;
    IF v_stale IS NOT NULL THEN
      PERFORM outbox._refresh_heads(p_q, v_stale);
    END IF;
    EXIT WHEN v_remaining <= 0;
    -- From the front, fewer heads than asked for and nothing refreshed: there is nothing more.
    EXIT WHEN v_front AND v_stale IS NULL AND pg_catalog.cardinality(v_keys) < v_asked;
  END LOOP;
  RETURN v_all;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Applies the wake notes producers left for a queue (outbox.partition_wakes, see
-- outbox.tg_queue__commit): a committed row of the note's key whose head a claim held at the
-- time. Each noted partition gets what the producer could not write itself: a head if it has
-- none, an empty head pointed at the row and woken, a floor lowered to the row. Notes of a head
-- that is still held stay for a later claim; a bounded number per call, oldest first.
-- Returns the keys it applied, for the caller to refresh.
-- Never waits for another claim: a head that another open transaction is making (a lock-mode batch
-- that applied a note of the key keeps its new head uncommitted for the whole batch) would hold
-- this insert on its index entry until that batch ends, and every claim of the queue behind it,
-- and two batches each making a head the other wants deadlocked. The insert gives up after
-- lock_timeout instead, in a block of its own (entered only when notes make heads), then key by
-- key, and the notes of a head it could not make stay for a later claim.
CREATE OR REPLACE FUNCTION outbox._apply_wakes(p_q outbox.queues)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET lock_timeout = '1ms'
AS $$
DECLARE
  v_notes tid[];
  v_keys text[];
  v_lows bigint[];
  v_fixed text[];
  v_made text[];
BEGIN
  SELECT pg_catalog.array_agg(w.ctid) INTO v_notes
  FROM (SELECT x.ctid FROM outbox.partition_wakes x WHERE x.queue_id = p_q.queue_id
        LIMIT 256 FOR UPDATE SKIP LOCKED) w;
  IF v_notes IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT pg_catalog.array_agg(s.k ORDER BY s.k), pg_catalog.array_agg(s.lo ORDER BY s.k)
    INTO v_keys, v_lows
  FROM (SELECT w.partition_key AS k, pg_catalog.min(w.low_id) AS lo FROM outbox.partition_wakes w
        WHERE w.ctid = ANY (v_notes) GROUP BY 1) s;

  -- Heads we can lock now (or that do not exist: made here) take the note; the others wait.
  -- SKIP LOCKED does not keep the lock from waiting on a head that a transaction that committed
  -- after this statement's snapshot moved and another holds now ("while locking updated version of
  -- tuple"): the lock_timeout ends that wait, and these notes then wait for a later claim (the error
  -- escaped the claim, which failed with 55P03). A block entered only by claims with notes.
  BEGIN
  WITH held AS (
    SELECT h.partition_key FROM outbox.partition_heads h
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
    FOR NO KEY UPDATE SKIP LOCKED),
  fixed AS (
    UPDATE outbox.partition_heads h
    SET head_id = COALESCE(h.head_id, u.lo),
        parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
        floor_id = LEAST(h.floor_id, u.lo)
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k AND u.k IN (SELECT held.partition_key FROM held)
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(fixed.partition_key) INTO v_fixed FROM fixed;
  EXCEPTION WHEN lock_not_available THEN
    v_fixed := NULL;
  END;

  IF EXISTS (SELECT 1 FROM unnest(v_keys) AS u(k)
             WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                               WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)) THEN
    BEGIN
      WITH made AS (
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        -- Floor 0: notes of the key beyond this call's may hold smaller ids.
        SELECT p_q.queue_id, u.k, u.lo, 0
        FROM unnest(v_keys, v_lows) AS u(k, lo)
        WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                          WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
        ORDER BY u.k
        ON CONFLICT (queue_id, partition_key) DO NOTHING
        RETURNING h.partition_key)
      SELECT pg_catalog.array_agg(made.partition_key) INTO v_made FROM made;
    EXCEPTION WHEN lock_not_available THEN
      -- One key by one, so that the head another transaction is making holds back only its key.
      v_made := NULL;
      FOR i IN 1..pg_catalog.cardinality(v_keys) LOOP
        BEGIN
          INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
          SELECT p_q.queue_id, v_keys[i], v_lows[i], 0
          WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                            WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_keys[i])
          ON CONFLICT (queue_id, partition_key) DO NOTHING;
          IF FOUND THEN
            v_made := v_made || v_keys[i];
          END IF;
        EXCEPTION WHEN lock_not_available THEN
          NULL;
        END;
      END LOOP;
    END;
  END IF;

  v_fixed := v_fixed || v_made;
  DELETE FROM outbox.partition_wakes w
  WHERE w.ctid = ANY (v_notes) AND w.partition_key = ANY (v_fixed);
  RETURN v_fixed;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives this transaction's pending rows of the late keys new ids from the queue's id sequence, in
-- their order, each larger than the key's clock (the largest committed id of its hash): delivered
-- order (id order) is then commit order (see outbox.tg_queue__commit). A sequence with CACHE > 1
-- hands this session values from its own cache, which may lie below ids other sessions already
-- committed: values not above the clock are drawn and dropped until one is (at most the cache
-- size; the clock never exceeds the sequence's last value, see the caller).
-- Skipped (the key keeps id order) only when the sequence is behind the clock, which means it was
-- set back by hand (setval, ALTER SEQUENCE RESTART): a new id must not collide with a later default.
-- One statement renumbers every late row, so a bulk transaction costs a few statements, not one
-- per row.
-- Arguments: the queue's id sequence (NULL: none), every key the transaction wrote and for each
-- (aligned arrays) its smallest and largest id and, when the key is late, its clock as the caller
-- read it (NULL: not late). Returns every key with its smallest and largest id after renumbering.
CREATE OR REPLACE FUNCTION outbox._renumber_late_rows(p_q outbox.queues, p_sequence regclass, p_keys text[],
                                                      p_los bigint[], p_his bigint[], p_clocks bigint[])
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_last bigint;
  v_ids bigint[];
  v_clock bigint;
  v_first bigint;
  v_moved text;
BEGIN
  v_last := COALESCE(pg_catalog.pg_sequence_last_value(p_sequence), 0);
  SELECT pg_catalog.max(u.clock) INTO v_clock
  FROM unnest(p_clocks) AS u(clock) WHERE u.clock <= v_last;
  IF p_sequence IS NOT NULL AND v_clock IS NOT NULL THEN
    -- This transaction's rows of every late key, in id order: one index range per key (LATERAL,
    -- kept as such by OFFSET 0, whatever the statistics of a table just filled say). Rows of the top transaction are known
    -- by their xmin; only others (a savepoint's, another producer's) need outbox._written_here.
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(x.id ORDER BY x.id)
       FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(k, lo, hi, clock)
       CROSS JOIN LATERAL (
         SELECT t.id FROM %s t
         WHERE t.%I = u.k::%s AND t.id BETWEEN u.lo AND u.hi AND t.sent_at IS NULL
           AND (t.xmin = $6 OR outbox._written_here(t.xmin))
         OFFSET 0) x
       WHERE u.clock <= $5',
      p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type)
      INTO v_ids USING p_keys, p_los, p_his, p_clocks, v_last,
        (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
  IF v_ids IS NULL THEN
    RETURN QUERY SELECT * FROM unnest(p_keys, p_los, p_his);
    RETURN;
  END IF;

  v_first := pg_catalog.nextval(p_sequence);
  WHILE v_first <= v_clock LOOP
    v_first := pg_catalog.nextval(p_sequence);
  END LOOP;
  -- New ids in the rows' order, each above every late key's clock: drawn from the sequence (the
  -- CTE is not inlined, nextval being volatile, and yields in ordinality order), or, for an id
  -- GENERATED ALWAYS, which takes only DEFAULT, by the identity one row after the other
  -- (outbox._ids_by_default), after the value above (dropped).
  IF outbox._id_generated_always(p_q.table_oid) THEN
    v_ids := outbox._ids_by_default(p_q.table_oid, v_ids);
    v_moved := 'moved AS (SELECT t.%2$I::text AS k, t.id FROM %1$s t WHERE t.id = ANY ($1))';
  ELSE
    v_moved := 'fresh AS (
       SELECT o.id AS old_id, CASE WHEN o.n = 1 THEN $2 ELSE pg_catalog.nextval($3) END AS new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(id, n)
       ORDER BY o.n),
     moved AS (
       UPDATE %1$s t SET id = f.new_id FROM fresh f WHERE t.id = f.old_id
       RETURNING t.%2$I::text AS k, t.id)';
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'WITH ' || v_moved || ',
     -- Every key with its range: that of its moved rows if any, else the one it came with.
     spans AS (
       SELECT m.k, m.id AS lo, m.id AS hi, true AS moved FROM moved m
       UNION ALL
       SELECT u.k, u.lo, u.hi, false FROM unnest($4::text[], $5::bigint[], $6::bigint[]) AS u(k, lo, hi))
     SELECT b.k, COALESCE(pg_catalog.min(b.lo) FILTER (WHERE b.moved), pg_catalog.min(b.lo)),
            COALESCE(pg_catalog.max(b.hi) FILTER (WHERE b.moved), pg_catalog.max(b.hi))
     FROM spans b GROUP BY b.k',
    p_q.table_oid::regclass, p_q.partition_column)
    USING v_ids, v_first, p_sequence, p_keys, p_los, p_his;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: gives poisoned rows (all of them, or the given ids) a fresh start: attempt_count 0,
-- due now, last_error kept for the record. Returns how many rows were requeued.
-- On a partitioned queue a requeued row goes to the TAIL of its key, as if committed now: it gets a
-- new id from the queue's sequence and is delivered after every row of its key committed before
-- the requeue, never before a successor that was already delivered (an old "register" must not
-- come back after the "unregister" that followed it without the operator asking for exactly that;
-- see docs/ordering.md). The rows then go through the producers' commit step (outbox._note_written):
-- order against concurrent producers, heads, NOTIFY. Their event is the same; only the position moves.
CREATE OR REPLACE FUNCTION outbox.requeue_poisoned(queue text, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'requeue_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
  v_old bigint[];
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
  v_new bigint[];
BEGIN
  PERFORM outbox._check_one_dimension(fn, 'ids', pg_catalog.array_ndims(ids));
  IF ids IS NOT NULL AND pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  IF v_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL, lease_token = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
      v_q.table_oid::regclass)
      USING v_q.max_attempts, ids;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
      PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
    END IF;
    RETURN v_count;
  END IF;

  IF v_q.id_sequence IS NULL THEN
    RAISE EXCEPTION '%: queue % has no id sequence to move requeued rows to the tail of their keys (call outbox.create_queue again)',
      fn, v_q.queue USING ERRCODE = '55000';
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
    v_q.table_oid::regclass)
    INTO v_old USING v_q.max_attempts, ids;
  IF v_old IS NULL THEN
    RETURN 0;
  END IF;
  -- A REPEATABLE READ or SERIALIZABLE requeue announces itself before it takes ids, as a
  -- producer's insert does (outbox.tg_queue__snapshot_producer).
  IF v_q.partition_column IS NOT NULL AND pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(outbox._snapshot_lock_class(), v_q.queue_id);
  END IF;
  -- An id GENERATED ALWAYS takes only DEFAULT: the rows are reset here with their ids, then given
  -- new ones from the identity in their order (outbox._ids_by_default).
  IF outbox._id_generated_always(v_q.table_oid) THEN
    EXECUTE pg_catalog.format(
      'WITH upd AS (
         UPDATE %1$s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                           lease_token = NULL, event_id = %2$s
         WHERE t.id = ANY ($1) AND t.sent_at IS NULL AND t.attempt_count >= $2
         RETURNING t.id)
       SELECT pg_catalog.array_agg(upd.id ORDER BY upd.id) FROM upd',
      v_q.table_oid::regclass, outbox._event_id_of(v_q))
      INTO v_old USING v_old, v_q.max_attempts;
    v_new := outbox._ids_by_default(v_q.table_oid, v_old);
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
              COALESCE(pg_catalog.sum(n), 0)
       FROM (SELECT t.%2$I::text AS k, pg_catalog.min(t.id) AS lo, pg_catalog.max(t.id) AS hi, pg_catalog.count(*) AS n
             FROM %1$s t WHERE t.id = ANY ($1) GROUP BY 1) s',
      v_q.table_oid::regclass, v_q.partition_column)
      INTO v_keys, v_mins, v_maxs, v_count USING v_new;
  ELSE
  -- New ids in the order of the old ones (generate_series yields in order, nextval runs per row).
  EXECUTE pg_catalog.format(
    'WITH moved AS (
       SELECT o.old_id, n.new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(old_id, i)
       JOIN (SELECT g.i, pg_catalog.nextval($3) AS new_id FROM pg_catalog.generate_series(1, $4) AS g(i)) n
         ON n.i = o.i),
     upd AS (
       UPDATE %1$s t SET id = m.new_id, attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                         lease_token = NULL, event_id = %3$s
       FROM moved m WHERE t.id = m.old_id AND t.sent_at IS NULL AND t.attempt_count >= $2
       RETURNING t.id, t.%2$I::text AS key)
     SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
            COALESCE(pg_catalog.sum(n), 0)
     FROM (SELECT upd.key AS k, pg_catalog.min(upd.id) AS lo, pg_catalog.max(upd.id) AS hi, pg_catalog.count(*) AS n
           FROM upd GROUP BY 1) s',
    v_q.table_oid::regclass, v_q.partition_column, outbox._event_id_of(v_q))
    INTO v_keys, v_mins, v_maxs, v_count USING v_old, v_q.max_attempts, v_q.id_sequence, pg_catalog.cardinality(v_old);
  END IF;
  IF v_keys IS NULL THEN
    RETURN 0;
  END IF;
  -- Each key's first and last moved row: what the commit step needs of them.
  PERFORM outbox._note_written(v_q.table_oid, v_keys || v_keys, v_mins || v_maxs);
  -- The commit step notifies only for heads it creates or wakes; a requeue is an operator asking
  -- for delivery now, so say so whatever the heads were.
  PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  RETURN v_count;
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
  SELECT '0.1.0'::text, 42;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Queues registered before this migration get the pgdrain_key_fixed trigger (outbox._install_heads_trigger
-- leaves every trigger in place as it is and adds the missing one). A registration whose table is gone
-- is left to create_queue or drop_queue.
DO $$
DECLARE
  v_q outbox.queues;
BEGIN
  FOR v_q IN SELECT q.* FROM outbox.queues q
             WHERE q.partition_column IS NOT NULL
               AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
             ORDER BY q.queue_id LOOP
    PERFORM outbox._install_heads_trigger(v_q);
  END LOOP;
END;
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
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;
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
  outbox.release_lease(text, bigint)
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
DO $$
DECLARE
  v_rel regclass;
BEGIN
  FOR v_rel IN SELECT t.tgrelid::regclass FROM pg_catalog.pg_trigger t
               WHERE t.tgname = 'pgdrain_key_fixed' AND NOT t.tgisinternal AND t.tgparentid = 0
                 AND t.tgfoid = 'outbox.tg_queue__key_fixed()'::regprocedure
               ORDER BY 1 LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', v_rel);
  END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether trigger p_name of table p_rel is in place as pgdrain makes it: enabled, of type p_type
-- (pg_trigger.tgtype: 4 AFTER INSERT, 6 BEFORE INSERT, 32 AFTER TRUNCATE, each FOR EACH STATEMENT),
-- firing p_function with exactly p_args, with a WHEN condition or not (p_when), and the transition
-- table p_new_table. create_queue run again leaves such a trigger as it is: dropping and making it
-- again takes the table's ACCESS EXCLUSIVE lock, which waits for every open lock-mode batch while
-- every producer and claim of the queue waits behind it.
CREATE OR REPLACE FUNCTION outbox._trigger_in_place(p_rel regclass, p_name text, p_function regprocedure,
                                                    p_type integer, p_args text[], p_when boolean DEFAULT false,
                                                    p_new_table text DEFAULT NULL)
RETURNS boolean
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_trigger t
    WHERE t.tgrelid = p_rel AND t.tgname = p_name AND NOT t.tgisinternal AND t.tgenabled = 'O'
      AND t.tgfoid = p_function AND t.tgtype = p_type AND t.tgnargs = pg_catalog.cardinality(p_args)
      AND t.tgargs = COALESCE(
            (SELECT pg_catalog.string_agg(pg_catalog.convert_to(u.a, pg_catalog.getdatabaseencoding()) || '\x00'::bytea,
                                          ''::bytea ORDER BY u.n)
             FROM pg_catalog.unnest(p_args) WITH ORDINALITY AS u(a, n)), ''::bytea)
      AND (t.tgqual IS NOT NULL) = p_when
      AND t.tgnewtable IS NOT DISTINCT FROM p_new_table::name);
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue its commit-step triggers:
-- - pgdrain_heads, a statement-level AFTER INSERT trigger running a function made for this queue,
--   outbox.tg_queue__heads_q<queue_id>, whose one statement names the partition column
--   statically, so PL/pgSQL plans it once per session instead of on every statement (a generic
--   function would need a dynamic EXECUTE). It notes the key and id of each new row for the commit
--   step, as outbox._note_written does; the first statement of a transaction, which inserts its
--   hook, inlined (one function call less on the usual transaction), later ones and SERIALIZABLE
--   transactions by calling it.
-- - pgdrain_snapshot, a statement-level BEFORE INSERT trigger that fires only in REPEATABLE READ
--   and SERIALIZABLE transactions (its WHEN costs a READ COMMITTED statement no function call):
--   outbox.tg_queue__snapshot_producer announces the transaction before it takes an id, so that
--   READ COMMITTED commit steps keep the clocks those transactions read (docs/ordering.md).
-- And makes the function of the commit step's late-rows statement (outbox._late_rows_function).
-- Made again by every create_queue, so they always match the registration (nothing else
-- reinstalls the triggers: run create_queue again if one was dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write the notes.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  v_function constant text := 'outbox.' || pg_catalog.quote_ident('tg_queue__heads_q' || p_q.queue_id);
BEGIN
  EXECUTE pg_catalog.format(
    $f$CREATE OR REPLACE FUNCTION %1$s()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
DECLARE
  v_more boolean;
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- Noted in the hook, see outbox._note_written.
    PERFORM outbox._note_written(TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id))
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
    RETURN NULL;
  END IF;
  -- The transaction's first statement notes in its hook; later ones in outbox.commit_notes, the
  -- first of them marking the hook (true comes back only from that update; nothing from later ones).
  INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
  SELECT pg_catalog.pg_current_xact_id(), pg_catalog.array_agg(TG_RELID), pg_catalog.array_agg(n.%3$I::text),
         pg_catalog.array_agg(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.count(*) > 0
  ON CONFLICT (xid) DO UPDATE SET more_notes = true WHERE NOT h.more_notes
  RETURNING h.more_notes INTO v_more;
  IF v_more OR NOT FOUND THEN
    INSERT INTO outbox.commit_notes (table_oid, keys, ids)
    SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id)
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
  END IF;
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  -- Triggers in place are left as they are (the function above was replaced in place): dropping
  -- one locks the table (outbox._trigger_in_place).
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_heads', (v_function || '()')::regprocedure, 4, '{}',
                                  false, 'pgdrain_new_rows') THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
         FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
  END IF;
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_snapshot', 'outbox.tg_queue__snapshot_producer()', 6,
                                  ARRAY[outbox._snapshot_lock_class()::text, p_q.queue_id::text], true) THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      $f$CREATE TRIGGER pgdrain_snapshot BEFORE INSERT ON %s FOR EACH STATEMENT
         WHEN (pg_catalog.current_setting('transaction_isolation') <> 'read committed')
         EXECUTE FUNCTION outbox.tg_queue__snapshot_producer(%s, %s)$f$,
      p_q.table_oid::regclass, outbox._snapshot_lock_class(), p_q.queue_id);
  END IF;
  -- The commit step's late-rows statement, made now rather than by a producer's commit, and made
  -- again in place: its name says the table and column it reads, not the statement, so a migration
  -- that changes the statement (and reinstalls these triggers, as migrations do) replaces it here.
  PERFORM outbox._late_rows_function(p_q, true);
END;
$$;
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
  IF v_schema = 'information_schema' OR v_schema LIKE 'pg\_%' THEN
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
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = v_rel AND t.tgname IN ('pgdrain_heads', 'pgdrain_snapshot')) THEN
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
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
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark,
-- clocks, claim hints, statements with kept plans and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_q outbox.queues;
  v_rel regclass;
BEGIN
  -- Not outbox._queue: that refuses a registration whose table is gone, which is what this clears.
  SELECT * INTO v_q FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', fn, v_name
      USING ERRCODE = '42P01';
  END IF;
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  IF pg_catalog.pg_table_is_visible(v_q.table_oid) IS NOT NULL THEN
    v_rel := v_q.table_oid::regclass;
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF v_rel IS NULL THEN
    NULL;
  ELSIF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_rel);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
  -- Its drainers' waiting mark (outbox._install_notify_trigger).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'drainer_waits_q' || v_q.queue_id);
  -- Its drainers' claim turn (outbox.claim_turn).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_turn_q' || v_q.queue_id);
  -- Its kept statements (outbox._prepared) and late-rows function (outbox._late_rows_function).
  PERFORM outbox._drop_functions('^_q' || v_q.queue_id || '_');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables, or recomputes them (_rebuild_heads): every partition with
-- pending rows gets its head again, searched from floor 0.
-- Heads producers made since then are kept (upsert). Runs once per queue: the first claim takes
-- the queue's rebuild lock, looks again, and rebuilds; concurrent claims wait for it.
CREATE OR REPLACE FUNCTION outbox._restore_heads(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_keys text[];
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -1);
  IF EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    RETURN;
  END IF;
  -- Keys with deliverable rows, and keys that have a head (a rebuild keeps heads: the search from
  -- floor 0 below repoints or, under the producer lock, drops them).
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k) FROM (
       SELECT %I::text AS k FROM %s WHERE sent_at IS NULL AND attempt_count < $1
       UNION
       SELECT h.partition_key FROM outbox.partition_heads h WHERE h.queue_id = $2) s',
    p_q.partition_column, p_q.table_oid::regclass)
    INTO v_keys USING p_q.max_attempts, p_q.queue_id;
  UPDATE outbox.partition_heads h SET floor_id = 0 WHERE h.queue_id = p_q.queue_id;
  PERFORM outbox._refresh_heads(p_q, v_keys);
  INSERT INTO outbox.partition_heads_built (queue_id) VALUES (p_q.queue_id) ON CONFLICT DO NOTHING;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The claim behind claim_batch (mode 'lease', partitioned queues; claim_batch leases unpartitioned
-- rows in one statement of its own) and claim_locked (mode 'lock'). Returns the ids of the claimed
-- rows; the caller reads them back. Deliverable = unsent, not poisoned, due, lease free or expired,
-- and on a partitioned queue the first deliverable row of its partition.
--
-- Partitioned queues claim through outbox.partition_heads (one row per partition with pending
-- work), never through the pending rows themselves, so blocked successors, heads in backoff and
-- poisoned rows cost nothing: a head backing off is "parked" until its time and woken (at most a
-- bounded number per call) when that time has come; a head whose row is leased stays ready and is
-- passed over with one probe. Heads are locked FOR NO KEY UPDATE SKIP LOCKED, which concurrent
-- claimers skip and producers (who hold only advisory locks) do not wait for. Each candidate is
-- still checked against the FIFO rule on the queue table, from the partition's floor (below it
-- every row is sent or poisoned), so poisoned rows in front of a head are not walked again.
--
-- p_run > 1 (claim_batch's and claim_locked's run_length): with each head claimed, the rows that
-- follow it in its partition (outbox._claim_run), up to p_run per partition and p_batch_size in
-- all, so that a partition's run costs one head search and, recorded together, one head write.
CREATE OR REPLACE FUNCTION outbox._claim(p_q outbox.queues, p_batch_size integer, p_lease interval, p_mode text,
                                         p_run integer)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table regclass := p_q.table_oid::regclass;
  -- Due and lease times against the clock, not now(): a claim in a transaction that began long ago
  -- must neither miss what has become due since nor hand out a lease that has already run out.
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_due constant text := 't.sent_at IS NULL AND t.attempt_count < $2
    AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= $now)
    AND (t.leased_until IS NULL OR t.leased_until <= $now)';
  v_all bigint[] := '{}';
  v_ids bigint[];
  v_keys text[];
  v_heads bigint[];
  v_floors bigint[];
  v_claimed_keys text[];
  v_stale text[];
  v_remaining integer := p_batch_size;
  v_until timestamptz;
  -- Where this session's last claim of this queue stopped among fresh heads (attempt_count 0), in
  -- head_id order, and when that run of claims started from the front (epoch seconds). Heads a claim
  -- or result moved on leave dead index entries in front of the live ones until vacuum removes them,
  -- which it can not while another session holds the xmin horizon: starting past them keeps a claim
  -- from walking the whole drain's history. A per-session hint only: a claim that finds fewer heads
  -- past it than it wants goes on from the front, and a cursor older than a second is not used.
  -- Heads behind every cursor (a lease that ran out, a row given back, a claim rolled back) are
  -- reached by the one claim per second per queue that searches from the front (the queue's shared
  -- hints, below); a session without a cursor starts where that search stopped. Retried heads
  -- (attempt_count > 0) are always searched from the front, after the fresh ones.
  v_cursor constant text := 'pgdrain.claim_cursor_' || p_q.queue_id;
  v_cursor_value constant text[] := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_cursor, true), ''), ',');
  v_run_started double precision := CASE
    WHEN v_cursor_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_cursor_value[2]::double precision END;
  v_from_head bigint := CASE WHEN v_run_started IS NOT NULL THEN v_cursor_value[1]::bigint END;
  v_last_fresh bigint;
  v_front_duty boolean := false;
  v_only_fresh boolean;
  -- The queue's shared hints (outbox._install_claim_hints); NULL when the queue has none.
  v_start constant regclass := pg_catalog.to_regclass('outbox.claim_start_q' || p_q.queue_id);
  v_front_hint constant regclass := pg_catalog.to_regclass('outbox.claim_front_q' || p_q.queue_id);
  v_now_ms constant bigint := (pg_catalog.date_part('epoch', v_now) * 1000)::bigint;
  v_front_ms bigint;
  v_seen text[] := '{}';
  -- A head whose row is in flight (leased, the lease running) is passed over without a lock: a
  -- claim that locked it would hold it until its commit (its WAL flush), and the result that moves
  -- the head on would wait for that.
  v_not_in_flight constant text := pg_catalog.format(
    'NOT EXISTS (SELECT 1 FROM %s t WHERE t.id = h.head_id AND t.leased_until > $5)', v_table);
  -- Where a search stopped is the largest head id it saw, as its snapshot saw it. A head that a
  -- result moved on after the search's snapshot was taken comes back locked in its new version
  -- (READ COMMITTED re-reads a row it locks), with the id of its key's next row, as far ahead as
  -- that row is: taken as the stop, it sent every replica's next claim past the queue's last head
  -- and on to the front (about half the claims of 4 replicas searched the front again). A version
  -- the statement's snapshot does not see is such a head, and is left out of the stop (our own
  -- transaction's writes are seen, though its xid may be past the snapshot's xmax).
  v_seen_by_search constant text :=
    '(s.written_by = (SELECT pg_catalog.xid(pg_catalog.pg_current_xact_id_if_assigned()))
      OR pg_catalog.age(s.written_by) > (SELECT pg_catalog.age(pg_catalog.xid(pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()))))
         AND s.written_by <> ALL (ARRAY(SELECT pg_catalog.xid(pg_catalog.pg_snapshot_xip(pg_catalog.pg_current_snapshot())))))';
  v_busy text[];
  v_front boolean;
  v_asked integer;
  v_run_ids bigint[];
  -- Rows a claimed head brings with it (itself included): how many heads to ask for. Starts from
  -- what this session's claims of the queue learnt (a per-session hint, like the cursor): starting
  -- every claim from p_run asked for too few heads whenever runs are shorter, and every claim then
  -- searched, leased and extended runs twice. A pass with budget left over measures the rows per
  -- head; one that the batch cut short only says they are at least that many, and keeps the larger
  -- estimate. An estimate older than a second is not used, so longer runs are found again (that
  -- claim may take two passes).
  v_run_hint constant text := 'pgdrain.run_rows_' || p_q.queue_id;
  v_run_hint_value constant text[] := CASE WHEN p_run > 1 THEN pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_run_hint, true), ''), ',') END;
  v_run_hint_since double precision := CASE
    WHEN v_run_hint_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_run_hint_value[2]::double precision END;
  v_rows_per_head numeric := CASE WHEN p_run <= 1 THEN 1
    WHEN v_run_hint_since IS NULL THEN p_run
    ELSE LEAST(p_run, GREATEST(1, v_run_hint_value[1]::numeric)) END;
  v_seen_per_head numeric;
  -- Lock mode: rows this transaction already holds from an earlier claim_locked. SKIP LOCKED does
  -- not skip our own locks, so without excluding them before the LIMIT they would take the places
  -- of rows that can still be claimed.
  v_held bigint[] := CASE WHEN p_mode = 'lock' THEN COALESCE(pg_catalog.string_to_array(NULLIF(
    pg_catalog.current_setting('pgdrain.held_' || p_q.queue_id, true), ''), ',')::bigint[], '{}') ELSE '{}' END;
BEGIN
  IF p_q.partition_column IS NULL THEN  -- lock mode only (see above)
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s AND t.id <> ALL ($4)
         ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, pg_catalog.replace(v_due, '$now', '$3')),
      'integer, integer, timestamptz, bigint[]', 'TABLE(pgdrain_ids bigint[])')
      INTO v_all USING p_batch_size, p_q.max_attempts, v_now, v_held;
    RETURN COALESCE(v_all, '{}');
  END IF;

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now. Its first statement (a SERIALIZABLE transaction: every one)
  -- noted them in its hook (outbox._note_written).
  -- (A transaction that has written nothing has no xid, and looks no further.)
  IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL
     AND (EXISTS (SELECT 1 FROM outbox.commit_notes n
                  WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = p_q.table_oid)
          OR EXISTS (SELECT 1 FROM outbox.commit_hooks h
                     WHERE h.xid = pg_catalog.pg_current_xact_id() AND p_q.table_oid = ANY (h.table_oids))) THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY(
      SELECT DISTINCT u.k FROM outbox.commit_notes n CROSS JOIN LATERAL pg_catalog.unnest(n.keys) AS u(k)
      WHERE n.xid = pg_catalog.pg_current_xact_id() AND n.table_oid = p_q.table_oid
      UNION
      SELECT u.k FROM outbox.commit_hooks h CROSS JOIN LATERAL unnest(h.table_oids, h.keys) AS u(table_oid, k)
      WHERE h.xid = pg_catalog.pg_current_xact_id() AND u.table_oid = p_q.table_oid));
  END IF;

  -- What producers could not write to heads a claim held while they committed.
  IF EXISTS (SELECT 1 FROM outbox.partition_wakes w WHERE w.queue_id = p_q.queue_id) THEN
    PERFORM outbox._apply_wakes(p_q);
  END IF;

  -- Wake parked heads whose lease or backoff has ended, oldest first, a bounded number per call.
  -- By ctid: a TID scan touches exactly these heads whatever the statistics say.
  UPDATE outbox.partition_heads h SET parked_until = NULL
  WHERE h.ctid = ANY (ARRAY(
    SELECT w.ctid FROM outbox.partition_heads w
    WHERE w.queue_id = p_q.queue_id AND w.parked_until <= v_now
    ORDER BY w.parked_until
    LIMIT GREATEST(4 * p_batch_size, 64)
    FOR NO KEY UPDATE SKIP LOCKED));

  -- No cursor of this session's own (a new session, or its run started over a second ago): only one
  -- claim per second per queue searches from the front, the one that finds the last search a second
  -- old, and leaves where it stopped as the queue's start; the others start there, past the dead
  -- entries the drain left in front (which a held xmin keeps), and their run is as old as that search.
  IF v_from_head IS NULL AND v_front_hint IS NOT NULL AND v_start IS NOT NULL THEN
    v_front_ms := pg_catalog.pg_sequence_last_value(v_front_hint);
    IF v_front_ms > v_now_ms - 1000 AND v_front_ms <= v_now_ms THEN
      v_from_head := pg_catalog.pg_sequence_last_value(v_start);
      v_run_started := v_front_ms / 1000.0;
    ELSE
      PERFORM pg_catalog.setval(v_front_hint, v_now_ms);
      v_front_duty := true;
    END IF;
  END IF;

  -- Lease mode: a cursor of this session's own goes on from where any claim of the queue last
  -- stopped among fresh heads, if that is further. The heads between were leased by other sessions
  -- (replicas): walking them cost each of four replicas the other three's claims (sampled claims in
  -- a 4-replica drain read 3-4x the buffers of a claim at rest; 1x with this). Not in lock mode,
  -- where it measured slower: a head another batch holds is skipped by its lock, and jumping past
  -- heads that batch then hands back sends more claims to the front.
  IF p_mode = 'lease' AND v_from_head IS NOT NULL AND v_start IS NOT NULL THEN
    v_from_head := GREATEST(v_from_head, pg_catalog.pg_sequence_last_value(v_start));
  END IF;

  FOR pass IN 1..4 LOOP
    v_front := v_from_head IS NULL;
    v_asked := pg_catalog.ceil(v_remaining / v_rows_per_head)::integer;
    IF NOT v_front THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE %s)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.xmin AS written_by FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 AND h.attempt_count = 0 AND h.head_id > $2
                 AND h.head_id <> ALL ($3) AND h.partition_key <> ALL ($4)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $6
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, v_not_in_flight),
        'integer, bigint, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint)')
        INTO v_keys, v_heads, v_floors, v_last_fresh
        USING p_q.queue_id, v_from_head, v_all || v_held, v_seen, v_now, v_asked;
      -- Too few past the cursor: the next pass goes on from the front; otherwise past these heads
      -- (a head in flight is not walked again by every pass).
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_asked THEN
        v_from_head := NULL;
      ELSE
        v_from_head := COALESCE(v_last_fresh, v_from_head);
      END IF;
    ELSE
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
                pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0 AND %s),
                pg_catalog.bool_and(s.attempt_count = 0)
         FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count, h.xmin AS written_by
               FROM outbox.partition_heads h
               WHERE h.queue_id = $1 AND h.parked_until IS NULL
                 -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
                 -- locks: without this a later pass would take them again.
                 AND (h.head_id IS NULL OR h.head_id <> ALL ($2))
                 AND h.partition_key <> ALL ($3)
                 AND %s
               ORDER BY h.attempt_count, h.head_id
               LIMIT $5
               FOR NO KEY UPDATE OF h SKIP LOCKED) s', v_seen_by_search, pg_catalog.replace(v_not_in_flight, '$5', '$4')),
        'integer, bigint[], text[], timestamptz, integer',
        'TABLE(pgdrain_keys text[], pgdrain_heads bigint[], pgdrain_floors bigint[], pgdrain_last bigint, pgdrain_only_fresh boolean)')
        INTO v_keys, v_heads, v_floors, v_last_fresh, v_only_fresh
        USING p_q.queue_id, v_all || v_held, v_seen, v_now, v_asked;
      v_run_started := pg_catalog.date_part('epoch', v_now);
      -- As many fresh heads as asked for: the next pass goes on past them as from a cursor.
      IF v_only_fresh AND pg_catalog.cardinality(v_keys) = v_asked THEN
        v_from_head := v_last_fresh;
      END IF;
    END IF;
    IF v_keys IS NULL THEN
      EXIT WHEN v_front;
      CONTINUE;
    END IF;
    IF v_last_fresh IS NOT NULL THEN
      -- As numeric: a double's text follows the caller's extra_float_digits (at -15 the time read
      -- 2e+09, a cursor that never aged, and heads behind it waited for another session's claim).
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started::numeric, false);
      -- Every search past the start moves it on, in both modes: a session without a cursor of its
      -- own then starts past the heads just taken. Lock mode left it to the search from the front,
      -- and such a claim walked every head moved in up to a second (3-6x a claim at rest in
      -- 4-replica drains).
      IF v_front_duty AND v_front THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      ELSIF NOT v_front AND v_start IS NOT NULL
            AND v_last_fresh > COALESCE(pg_catalog.pg_sequence_last_value(v_start), 0) THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      END IF;
    END IF;

    -- Lease mode leases what it locks in the same statement (one statement planned, not two).
    v_until := pg_catalog.clock_timestamp() + p_lease;
    EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
      'WITH picked AS (
         SELECT t.id, t.%2$I AS key, t.ctid AS version, t.tableoid AS version_table
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS c(id, floor_id, key)
         -- A head must point at a row of its own partition (heads of new keys come from settings a
         -- producer could forge); one that does not is stale and refreshed below.
         JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%4$s
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           -- A floor at the head itself (a head a result moved on, the usual one) leaves no row
           -- below it to look for: no probe.
           AND (c.floor_id >= t.id
                OR NOT EXISTS (SELECT 1 FROM %1$s p
                               WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                                 AND p.sent_at IS NULL AND p.attempt_count < $2
                               OFFSET 0))
         FOR UPDATE OF t SKIP LOCKED),
       claimed AS (%5$s)
       SELECT pg_catalog.array_agg(claimed.id), pg_catalog.array_agg(claimed.key::text) FROM claimed',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type,
      CASE WHEN p_mode = 'lease'
           THEN pg_catalog.format(
             -- By the version picked locked (a TID scan), not by id: a second index probe per row.
             -- A version newer than the statement's snapshot (a concurrent release committed
             -- between the snapshot and the lock) is not leased; its head counts as stale below.
             -- With its table: a ctid names a row only within one table, and a queue table
             -- partitioned by range has one per partition (each with its own (0,1)).
             'UPDATE %s u SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $6
              FROM picked WHERE u.ctid = picked.version AND u.tableoid = picked.version_table
              RETURNING u.id, picked.key', v_table)
           ELSE 'SELECT picked.id, picked.key FROM picked' END),
      'bigint[], integer, bigint[], text[], timestamptz, timestamptz', 'TABLE(pgdrain_ids bigint[], pgdrain_keys text[])')
      INTO v_ids, v_claimed_keys USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now, v_until;

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_run > 1 AND v_remaining > 0 THEN
        v_run_ids := outbox._claim_run(p_q, v_ids, v_claimed_keys, p_run - 1, v_remaining, v_now, v_until, p_mode);
        v_all := v_all || v_run_ids;
        v_remaining := v_remaining - pg_catalog.cardinality(v_run_ids);
        v_seen_per_head := (pg_catalog.cardinality(v_ids) + pg_catalog.cardinality(v_run_ids))::numeric
                           / pg_catalog.cardinality(v_ids);
        v_rows_per_head := LEAST(p_run, GREATEST(1, CASE WHEN v_remaining > 0 THEN v_seen_per_head
                                                         ELSE GREATEST(v_seen_per_head, v_rows_per_head) END));
        v_run_hint_since := COALESCE(v_run_hint_since, pg_catalog.date_part('epoch', v_now));
        PERFORM pg_catalog.set_config(v_run_hint,
          pg_catalog.round(v_rows_per_head, 2) || ',' || v_run_hint_since::numeric, false);
      END IF;
    END IF;

    -- Heads not claimed are in flight (their row is leased right now: nothing to refresh, their
    -- result moves them on, and an expired lease makes the row claimable again through the same
    -- head; this call looks at them no more) or stale: pointing at a row that is no longer (or not
    -- yet) the partition's deliverable head, refreshed here.
    -- NOT IN a subquery: a hashed subplan, linear in the keys (<> ALL compared every key with every
    -- claimed one: 0.7 ms per claim of 256 rows, 10 ms of 1,000).
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k NOT IN (SELECT c FROM pg_catalog.unnest(v_claimed_keys) AS c);
    v_busy := NULL;
    IF v_stale IS NOT NULL THEN
      EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
        'SELECT pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NULL),
                pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NOT NULL)
         FROM unnest($1::bigint[], $2::text[]) AS c(id, key)
         LEFT JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%3$s AND t.sent_at IS NULL
           AND t.attempt_count < $4 AND t.leased_until > $5
           AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= t.leased_until)
         WHERE c.key = ANY ($3)',
        v_table, p_q.partition_column, p_q.partition_type),
        'bigint[], text[], text[], integer, timestamptz', 'TABLE(pgdrain_stale text[], pgdrain_busy text[])')
        INTO v_stale, v_busy USING v_heads, v_keys, v_stale, p_q.max_attempts, v_now;
      v_seen := v_seen || COALESCE(v_busy, '{}');
    END IF;
    IF v_stale IS NOT NULL THEN
      PERFORM outbox._refresh_heads(p_q, v_stale);
    END IF;
    EXIT WHEN v_remaining <= 0;
    -- From the front, fewer heads than asked for and nothing refreshed: there is nothing more.
    EXIT WHEN v_front AND v_stale IS NULL AND pg_catalog.cardinality(v_keys) < v_asked;
  END LOOP;
  RETURN v_all;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Applies the wake notes producers left for a queue (outbox.partition_wakes, see
-- outbox.tg_queue__commit): a committed row of the note's key whose head a claim held at the
-- time. Each noted partition gets what the producer could not write itself: a head if it has
-- none, an empty head pointed at the row and woken, a floor lowered to the row. Notes of a head
-- that is still held stay for a later claim; a bounded number per call, oldest first.
-- Returns the keys it applied, for the caller to refresh.
-- Never waits for another claim: a head that another open transaction is making (a lock-mode batch
-- that applied a note of the key keeps its new head uncommitted for the whole batch) would hold
-- this insert on its index entry until that batch ends, and every claim of the queue behind it,
-- and two batches each making a head the other wants deadlocked. The insert gives up after
-- lock_timeout instead, in a block of its own (entered only when notes make heads), then key by
-- key, and the notes of a head it could not make stay for a later claim.
CREATE OR REPLACE FUNCTION outbox._apply_wakes(p_q outbox.queues)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET lock_timeout = '1ms'
AS $$
DECLARE
  v_notes tid[];
  v_keys text[];
  v_lows bigint[];
  v_fixed text[];
  v_made text[];
BEGIN
  SELECT pg_catalog.array_agg(w.ctid) INTO v_notes
  FROM (SELECT x.ctid FROM outbox.partition_wakes x WHERE x.queue_id = p_q.queue_id
        LIMIT 256 FOR UPDATE SKIP LOCKED) w;
  IF v_notes IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT pg_catalog.array_agg(s.k ORDER BY s.k), pg_catalog.array_agg(s.lo ORDER BY s.k)
    INTO v_keys, v_lows
  FROM (SELECT w.partition_key AS k, pg_catalog.min(w.low_id) AS lo FROM outbox.partition_wakes w
        WHERE w.ctid = ANY (v_notes) GROUP BY 1) s;

  -- Heads we can lock now (or that do not exist: made here) take the note; the others wait.
  WITH held AS (
    SELECT h.partition_key FROM outbox.partition_heads h
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
    FOR NO KEY UPDATE SKIP LOCKED),
  fixed AS (
    UPDATE outbox.partition_heads h
    SET head_id = COALESCE(h.head_id, u.lo),
        parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
        floor_id = LEAST(h.floor_id, u.lo)
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k AND u.k IN (SELECT held.partition_key FROM held)
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(fixed.partition_key) INTO v_fixed FROM fixed;

  IF EXISTS (SELECT 1 FROM unnest(v_keys) AS u(k)
             WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                               WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)) THEN
    BEGIN
      WITH made AS (
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        -- Floor 0: notes of the key beyond this call's may hold smaller ids.
        SELECT p_q.queue_id, u.k, u.lo, 0
        FROM unnest(v_keys, v_lows) AS u(k, lo)
        WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                          WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
        ORDER BY u.k
        ON CONFLICT (queue_id, partition_key) DO NOTHING
        RETURNING h.partition_key)
      SELECT pg_catalog.array_agg(made.partition_key) INTO v_made FROM made;
    EXCEPTION WHEN lock_not_available THEN
      -- One key by one, so that the head another transaction is making holds back only its key.
      v_made := NULL;
      FOR i IN 1..pg_catalog.cardinality(v_keys) LOOP
        BEGIN
          INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
          SELECT p_q.queue_id, v_keys[i], v_lows[i], 0
          WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                            WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_keys[i])
          ON CONFLICT (queue_id, partition_key) DO NOTHING;
          IF FOUND THEN
            v_made := v_made || v_keys[i];
          END IF;
        EXCEPTION WHEN lock_not_available THEN
          NULL;
        END;
      END LOOP;
    END;
  END IF;

  v_fixed := v_fixed || v_made;
  DELETE FROM outbox.partition_wakes w
  WHERE w.ctid = ANY (v_notes) AND w.partition_key = ANY (v_fixed);
  RETURN v_fixed;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives this transaction's pending rows of the late keys new ids from the queue's id sequence, in
-- their order, each larger than the key's clock (the largest committed id of its hash): delivered
-- order (id order) is then commit order (see outbox.tg_queue__commit). A sequence with CACHE > 1
-- hands this session values from its own cache, which may lie below ids other sessions already
-- committed: values not above the clock are drawn and dropped until one is (at most the cache
-- size; the clock never exceeds the sequence's last value, see the caller).
-- Skipped (the key keeps id order) only when the sequence is behind the clock, which means it was
-- set back by hand (setval, ALTER SEQUENCE RESTART): a new id must not collide with a later default.
-- One statement renumbers every late row, so a bulk transaction costs a few statements, not one
-- per row.
-- Arguments: the queue's id sequence (NULL: none), every key the transaction wrote and for each
-- (aligned arrays) its smallest and largest id and, when the key is late, its clock as the caller
-- read it (NULL: not late). Returns every key with its smallest and largest id after renumbering.
CREATE OR REPLACE FUNCTION outbox._renumber_late_rows(p_q outbox.queues, p_sequence regclass, p_keys text[],
                                                      p_los bigint[], p_his bigint[], p_clocks bigint[])
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_last bigint;
  v_ids bigint[];
  v_clock bigint;
  v_first bigint;
BEGIN
  v_last := COALESCE(pg_catalog.pg_sequence_last_value(p_sequence), 0);
  SELECT pg_catalog.max(u.clock) INTO v_clock
  FROM unnest(p_clocks) AS u(clock) WHERE u.clock <= v_last;
  IF p_sequence IS NOT NULL AND v_clock IS NOT NULL THEN
    -- This transaction's rows of every late key, in id order: one index range per key (LATERAL,
    -- kept as such by OFFSET 0, whatever the statistics of a table just filled say). Rows of the top transaction are known
    -- by their xmin; only others (a savepoint's, another producer's) need outbox._written_here.
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(x.id ORDER BY x.id)
       FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(k, lo, hi, clock)
       CROSS JOIN LATERAL (
         SELECT t.id FROM %s t
         WHERE t.%I = u.k::%s AND t.id BETWEEN u.lo AND u.hi AND t.sent_at IS NULL
           AND (t.xmin = $6 OR outbox._written_here(t.xmin))
         OFFSET 0) x
       WHERE u.clock <= $5',
      p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type)
      INTO v_ids USING p_keys, p_los, p_his, p_clocks, v_last,
        (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
  IF v_ids IS NULL THEN
    RETURN QUERY SELECT * FROM unnest(p_keys, p_los, p_his);
    RETURN;
  END IF;

  v_first := pg_catalog.nextval(p_sequence);
  WHILE v_first <= v_clock LOOP
    v_first := pg_catalog.nextval(p_sequence);
  END LOOP;
  -- New ids drawn in the rows' order (the CTE is not inlined, nextval being volatile, and yields
  -- in ordinality order), each above every late key's clock.
  RETURN QUERY EXECUTE pg_catalog.format(
    'WITH fresh AS (
       SELECT o.id AS old_id, CASE WHEN o.n = 1 THEN $2 ELSE pg_catalog.nextval($3) END AS new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(id, n)
       ORDER BY o.n),
     moved AS (
       UPDATE %1$s t SET id = f.new_id FROM fresh f WHERE t.id = f.old_id
       RETURNING t.%2$I::text AS k, t.id),
     -- Every key with its range: that of its moved rows if any, else the one it came with.
     spans AS (
       SELECT m.k, m.id AS lo, m.id AS hi, true AS moved FROM moved m
       UNION ALL
       SELECT u.k, u.lo, u.hi, false FROM unnest($4::text[], $5::bigint[], $6::bigint[]) AS u(k, lo, hi))
     SELECT b.k, COALESCE(pg_catalog.min(b.lo) FILTER (WHERE b.moved), pg_catalog.min(b.lo)),
            COALESCE(pg_catalog.max(b.hi) FILTER (WHERE b.moved), pg_catalog.max(b.hi))
     FROM spans b GROUP BY b.k',
    p_q.table_oid::regclass, p_q.partition_column)
    USING v_ids, v_first, p_sequence, p_keys, p_los, p_his;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: gives poisoned rows (all of them, or the given ids) a fresh start: attempt_count 0,
-- due now, last_error kept for the record. Returns how many rows were requeued.
-- On a partitioned queue a requeued row goes to the TAIL of its key, as if committed now: it gets a
-- new id from the queue's sequence and is delivered after every row of its key committed before
-- the requeue, never before a successor that was already delivered (an old "register" must not
-- come back after the "unregister" that followed it without the operator asking for exactly that;
-- see docs/ordering.md). The rows then go through the producers' commit step (outbox._note_written):
-- order against concurrent producers, heads, NOTIFY. Their event is the same; only the position moves.
CREATE OR REPLACE FUNCTION outbox.requeue_poisoned(queue text, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'requeue_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
  v_old bigint[];
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  PERFORM outbox._check_one_dimension(fn, 'ids', pg_catalog.array_ndims(ids));
  IF ids IS NOT NULL AND pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  IF v_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL, lease_token = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
      v_q.table_oid::regclass)
      USING v_q.max_attempts, ids;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
      PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
    END IF;
    RETURN v_count;
  END IF;

  IF v_q.id_sequence IS NULL THEN
    RAISE EXCEPTION '%: queue % has no id sequence to move requeued rows to the tail of their keys (call outbox.create_queue again)',
      fn, v_q.queue USING ERRCODE = '55000';
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
    v_q.table_oid::regclass)
    INTO v_old USING v_q.max_attempts, ids;
  IF v_old IS NULL THEN
    RETURN 0;
  END IF;
  -- A REPEATABLE READ or SERIALIZABLE requeue announces itself before it takes ids, as a
  -- producer's insert does (outbox.tg_queue__snapshot_producer).
  IF v_q.partition_column IS NOT NULL AND pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(outbox._snapshot_lock_class(), v_q.queue_id);
  END IF;
  -- New ids in the order of the old ones (generate_series yields in order, nextval runs per row).
  EXECUTE pg_catalog.format(
    'WITH moved AS (
       SELECT o.old_id, n.new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(old_id, i)
       JOIN (SELECT g.i, pg_catalog.nextval($3) AS new_id FROM pg_catalog.generate_series(1, $4) AS g(i)) n
         ON n.i = o.i),
     upd AS (
       UPDATE %1$s t SET id = m.new_id, attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                         lease_token = NULL, event_id = %3$s
       FROM moved m WHERE t.id = m.old_id AND t.sent_at IS NULL AND t.attempt_count >= $2
       RETURNING t.id, t.%2$I::text AS key)
     SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
            COALESCE(pg_catalog.sum(n), 0)
     FROM (SELECT upd.key AS k, pg_catalog.min(upd.id) AS lo, pg_catalog.max(upd.id) AS hi, pg_catalog.count(*) AS n
           FROM upd GROUP BY 1) s',
    v_q.table_oid::regclass, v_q.partition_column, outbox._event_id_of(v_q))
    INTO v_keys, v_mins, v_maxs, v_count USING v_old, v_q.max_attempts, v_q.id_sequence, pg_catalog.cardinality(v_old);
  IF v_keys IS NULL THEN
    RETURN 0;
  END IF;
  -- Each key's first and last moved row: what the commit step needs of them.
  PERFORM outbox._note_written(v_q.table_oid, v_keys || v_keys, v_mins || v_maxs);
  -- The commit step notifies only for heads it creates or wakes; a requeue is an operator asking
  -- for delivery now, so say so whatever the heads were.
  PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  RETURN v_count;
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
  SELECT '0.1.0'::text, 41;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
SELECT outbox._forget_kept_statements();
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
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;
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
  outbox.release_lease(text, bigint)
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

-- +goose StatementBegin
DROP FUNCTION IF EXISTS outbox.tg_queue__key_fixed();
-- +goose StatementEnd

-- +goose StatementBegin
DROP FUNCTION IF EXISTS outbox._ids_by_default(regclass, bigint[]);
-- +goose StatementEnd

-- +goose StatementBegin
DROP FUNCTION IF EXISTS outbox._id_generated_always(regclass);
-- +goose StatementEnd
