-- The insert behind enqueue and enqueue_event (p_function names the caller in errors): validates
-- the event and inserts it, returning its id (provisional until COMMIT on a partitioned queue, see
-- DESIGN "Identity and order of an event") and its event_id. deliver_at delays the first attempt,
-- at most the queue's max_delay (it is the row's next_attempt_at; on a partitioned queue it holds back the key's later events
-- too, which keep their order). headers (an object of strings) travel with the event to the sink.
CREATE OR REPLACE FUNCTION outbox._enqueue(p_function text, p_queue text, p_event_type text, p_payload jsonb,
                                           p_partition_key text, p_deliver_at timestamptz, p_headers jsonb,
                                           p_event_id uuid)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(p_function, p_queue);
  v_key_column text := '';
  v_key_value text := '';
  v_key_read text;
  v_cast_error text;
BEGIN
  IF p_event_type IS NULL OR outbox._is_blank(p_event_type) THEN
    PERFORM outbox._invalid(p_function, 'event_type must be a non-empty string');
  END IF;
  IF p_payload IS NULL THEN
    PERFORM outbox._invalid(p_function, 'payload must not be NULL (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF pg_catalog.jsonb_typeof(p_payload) = 'null' THEN
    PERFORM outbox._invalid(p_function, 'payload must not be JSON null (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF p_deliver_at IN ('infinity', '-infinity') THEN
    PERFORM outbox._invalid(p_function, 'deliver_at must be a finite time (NULL: deliver now)');
  END IF;
  PERFORM outbox._check_delay(p_function, 'deliver_at', v_q, ARRAY[p_deliver_at], false);
  IF p_headers IS NOT NULL AND (pg_catalog.jsonb_typeof(p_headers) <> 'object'
                                OR pg_catalog.jsonb_path_exists(p_headers, '$.* ? (@.type() != "string")')) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'headers must be NULL or a JSON object whose values are strings, got %s', pg_catalog.left(p_headers::text, 200)));
  END IF;
  IF v_q.partition_column IS NULL THEN
    IF p_partition_key IS NOT NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be NULL: queue %s has no partition column', v_q.queue));
    END IF;
  ELSE
    IF p_partition_key IS NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must not be NULL: queue %s is partitioned by %s', v_q.queue, v_q.partition_column));
    END IF;
    -- Blank as event_type is (every Unicode space, zero-width characters): producers that lost
    -- their key would otherwise share one partition under a key nobody can see.
    IF outbox._is_blank(p_partition_key) THEN
      -- Named by code point unless plain spaces: the characters themselves show nothing.
      PERFORM outbox._invalid(p_function, pg_catalog.format('partition_key must be a non-empty string, got %s',
        CASE WHEN p_partition_key ~ '^ *$' THEN pg_catalog.quote_literal(p_partition_key)
             ELSE pg_catalog.format('only white space and invisible characters (%s%s)',
               (SELECT pg_catalog.string_agg('U+' || pg_catalog.upper(pg_catalog.lpad(pg_catalog.to_hex(pg_catalog.ascii(c.ch)), 4, '0')),
                                             ' ' ORDER BY c.n)
                FROM pg_catalog.regexp_split_to_table(pg_catalog.left(p_partition_key, 20), '') WITH ORDINALITY AS c(ch, n)),
               CASE WHEN pg_catalog.length(p_partition_key) > 20 THEN ' ...' ELSE '' END) END));
    END IF;
    -- A key column of another type than text: the key must read as one of its values, said here
    -- with the argument's name (the INSERT's cast error named neither the function nor
    -- partition_key), and a varchar(n) or char(n) key must fit (an explicit cast cut it short:
    -- 'abcdefgh' became key 'abcde', another key's). In a block of its own, so a key of text
    -- costs nothing more.
    IF v_q.partition_type <> 'text' THEN
      BEGIN
        EXECUTE pg_catalog.format('SELECT $1::%s::text', v_q.partition_type) INTO v_key_read USING p_partition_key;
      EXCEPTION WHEN data_exception OR integrity_constraint_violation THEN
        GET STACKED DIAGNOSTICS v_cast_error = MESSAGE_TEXT;
        PERFORM outbox._invalid(p_function, pg_catalog.format(
          'partition_key must be a value of column %s (%s) of %s, got %s: %s', v_q.partition_column,
          v_q.partition_type, v_q.queue, pg_catalog.quote_literal(pg_catalog.left(p_partition_key, 200)), v_cast_error));
      END;
      -- A string type (varchar(n), char(n), a domain over one) cut the key short when the cast
      -- changed more than trailing spaces, which PostgreSQL drops from such a value too.
      IF v_key_read <> p_partition_key AND v_key_read <> pg_catalog.rtrim(p_partition_key, ' ')
         AND (SELECT t.typcategory FROM pg_catalog.pg_type t WHERE t.oid = pg_catalog.to_regtype(v_q.partition_type)) = 'S' THEN
        PERFORM outbox._invalid(p_function, pg_catalog.format(
          'partition_key must fit column %s (%s) of %s, got %s characters', v_q.partition_column,
          v_q.partition_type, v_q.queue, pg_catalog.length(p_partition_key)));
      END IF;
    END IF;
    v_key_column := pg_catalog.format(', %I', v_q.partition_column);
    v_key_value := pg_catalog.format(', $6::%s', v_q.partition_type);
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO %s AS t (event_type, payload, next_attempt_at, headers, event_id%s)
     VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.gen_random_uuid())%s)
     RETURNING t.id, t.event_id',
    v_q.table_oid::regclass, v_key_column, v_key_value)
    USING p_event_type, p_payload, p_deliver_at, p_headers, p_event_id, p_partition_key;
END;
$$;
