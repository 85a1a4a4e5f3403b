-- Test-only helpers for the pgTAP suite (schema test_helpers), loaded once before pg_prove runs.
-- Re-runnable: everything is CREATE OR REPLACE / IF NOT EXISTS. Queues made here get unique names
-- from a sequence (never rolled back), so test files never collide even on a shared database.
CREATE SCHEMA IF NOT EXISTS test_helpers;

CREATE SEQUENCE IF NOT EXISTS test_helpers.queue_seq;

-- A queue name that no table or registry row uses yet: 'public.tq_<n>'.
CREATE OR REPLACE FUNCTION test_helpers.fresh_name()
RETURNS text
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT 'public.tq_' || pg_catalog.nextval('test_helpers.queue_seq');
$$;

-- A new queue with a unique name (outbox.create_queue with the given settings); returns its name.
CREATE OR REPLACE FUNCTION test_helpers.new_queue(partition_column text DEFAULT NULL,
                                                  max_attempts integer DEFAULT 10,
                                                  backoff_min interval DEFAULT '1 second',
                                                  backoff_max interval DEFAULT '30 seconds',
                                                  permanent_policy text DEFAULT 'poison')
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_name text := test_helpers.fresh_name();
BEGIN
  PERFORM outbox.create_queue(v_name, partition_column, max_attempts, backoff_min, backoff_max,
                              permanent_policy);
  RETURN v_name;
END;
$$;

-- Enqueues n events of type 'e<i>' with payload {"i": i} (and the partition key, if given);
-- returns their ids in insertion order.
CREATE OR REPLACE FUNCTION test_helpers.add(queue text, n integer, partition_key text DEFAULT NULL)
RETURNS bigint[]
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT pg_catalog.array_agg(outbox.enqueue(queue, 'e' || i, pg_catalog.jsonb_build_object('i', i),
                                             partition_key) ORDER BY i)
  FROM pg_catalog.generate_series(1, n) AS i;
$$;

-- The whole row as jsonb, for byte-for-byte comparisons before and after a call.
CREATE OR REPLACE FUNCTION test_helpers.row_json(queue text, id bigint)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_row jsonb;
BEGIN
  EXECUTE pg_catalog.format('SELECT pg_catalog.to_jsonb(t) FROM %s t WHERE t.id = $1', queue::regclass)
    INTO v_row USING id;
  RETURN v_row;
END;
$$;

-- Everything a failing call could have touched: every row of the queue table, its partition
-- heads, its registry row, its id sequence (not rolled back by an error, so an insert that
-- happened before a late validation shows here), its indexes and triggers.
CREATE OR REPLACE FUNCTION test_helpers.state(p_queue text)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_rel regclass := pg_catalog.to_regclass(p_queue);
  v_rows jsonb;
  v_seq text;
  v_seq_state jsonb;
BEGIN
  IF v_rel IS NOT NULL THEN
    EXECUTE pg_catalog.format('SELECT pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t) ORDER BY t.id) FROM %s t', v_rel)
      INTO v_rows;
    v_seq := pg_catalog.pg_get_serial_sequence(v_rel::text, 'id');
    IF v_seq IS NOT NULL THEN
      EXECUTE pg_catalog.format('SELECT pg_catalog.jsonb_build_object(''last_value'', last_value, ''is_called'', is_called) FROM %s', v_seq)
        INTO v_seq_state;
    END IF;
  END IF;
  RETURN pg_catalog.jsonb_build_object(
    'rows', v_rows,
    'id_sequence', v_seq_state,
    'registry', (SELECT pg_catalog.to_jsonb(q) FROM outbox.queues q WHERE q.queue = p_queue),
    'heads', (SELECT pg_catalog.jsonb_agg(pg_catalog.to_jsonb(h) ORDER BY h.partition_key)
              FROM outbox.partition_heads h JOIN outbox.queues q USING (queue_id) WHERE q.queue = p_queue),
    'indexes', (SELECT pg_catalog.jsonb_agg(pg_catalog.pg_get_indexdef(i.indexrelid) ORDER BY 1)
                FROM pg_catalog.pg_index i WHERE i.indrelid = v_rel),
    'triggers', (SELECT pg_catalog.jsonb_agg(pg_catalog.pg_get_triggerdef(tg.oid) ORDER BY tg.tgname)
                 FROM pg_catalog.pg_trigger tg WHERE tg.tgrelid = v_rel AND NOT tg.tgisinternal),
    'queue_count', (SELECT pg_catalog.count(*) FROM outbox.queues),
    'head_count', (SELECT pg_catalog.count(*) FROM outbox.partition_heads));
END;
$$;

-- Time inside one pgTAP transaction is frozen (now() is the transaction start), so a lease
-- "expires" by moving leased_until into the past. Parked partition heads are woken too (waking
-- early is always safe: a claim re-checks the row and parks the head again). Returns rows moved.
CREATE OR REPLACE FUNCTION test_helpers.expire_leases(queue text)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_count bigint;
BEGIN
  EXECUTE pg_catalog.format(
    'WITH u AS (UPDATE %s SET leased_until = pg_catalog.now() - interval ''1 second''
                WHERE leased_until > pg_catalog.now() - interval ''1 second'' RETURNING 1)
     SELECT pg_catalog.count(*) FROM u', queue::regclass) INTO v_count;
  PERFORM test_helpers.wake_heads(queue);
  RETURN v_count;
END;
$$;

-- Ends every backoff: next_attempt_at in the future moves one second into the past; parked
-- partition heads are woken. Returns rows moved.
CREATE OR REPLACE FUNCTION test_helpers.end_backoff(queue text)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_count bigint;
BEGIN
  EXECUTE pg_catalog.format(
    'WITH u AS (UPDATE %s SET next_attempt_at = pg_catalog.now() - interval ''1 second''
                WHERE next_attempt_at > pg_catalog.now() - interval ''1 second'' RETURNING 1)
     SELECT pg_catalog.count(*) FROM u', queue::regclass) INTO v_count;
  PERFORM test_helpers.wake_heads(queue);
  RETURN v_count;
END;
$$;

-- Moves parked_until of the queue's parked heads into the past.
CREATE OR REPLACE FUNCTION test_helpers.wake_heads(queue text)
RETURNS void
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  UPDATE outbox.partition_heads h SET parked_until = pg_catalog.now() - interval '1 second'
  FROM outbox.queues q
  WHERE q.queue = wake_heads.queue AND h.queue_id = q.queue_id AND h.parked_until IS NOT NULL;
$$;

-- Row versions written to the queue table by the current transaction so far (inserts excluded):
-- lets a test count how often a row is written.
CREATE OR REPLACE FUNCTION test_helpers.updates_in_tx(queue text)
RETURNS bigint
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT s.n_tup_upd FROM pg_catalog.pg_stat_xact_user_tables s WHERE s.relid = queue::regclass;
$$;

-- Ids of the queue's rows that satisfy a condition on alias t, in id order.
CREATE OR REPLACE FUNCTION test_helpers.ids_where(queue text, condition text)
RETURNS bigint[]
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_ids bigint[];
BEGIN
  EXECUTE pg_catalog.format('SELECT COALESCE(pg_catalog.array_agg(t.id ORDER BY t.id), ''{}'') FROM %s t WHERE %s',
                            queue::regclass, condition) INTO v_ids;
  RETURN v_ids;
END;
$$;
