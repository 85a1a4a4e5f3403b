-- A producer's commit step finds the queue of the table it wrote by index: the blocks of
-- outbox.queues it reads do not grow with the number of queues registered in the database (it
-- scanned outbox.queues on every commit before 00027: every queue made every producer slower).
-- The registry's other rows are stand-ins (tables long dropped: create_queue for each of them would
-- make this test slow, and the commit step reads only their registry rows).
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue('k') AS q \gset

CREATE FUNCTION pg_temp.queues_blocks() RETURNS bigint LANGUAGE sql VOLATILE AS
  $$SELECT pg_catalog.pg_stat_get_xact_blocks_fetched('outbox.queues'::regclass)$$;
CREATE FUNCTION pg_temp.commit_step_blocks(p_queue text, p_rows integer, p_statements integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_before bigint := pg_temp.queues_blocks();
BEGIN
  FOR i IN 1..p_statements LOOP
    EXECUTE format('INSERT INTO %s (event_type, payload, k) SELECT %L, %L, %L || g FROM generate_series(1, %s) g',
                   p_queue, 'e', '{}', 'key-' || i || '-', p_rows);
  END LOOP;
  SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
  SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
  RETURN pg_temp.queues_blocks() - v_before;
END $$;

-- 3,000 more queues: their registry alone is over a hundred blocks.
INSERT INTO outbox.queues (queue, table_oid, max_attempts, backoff_min, backoff_max, permanent_policy, channel)
SELECT 'stand_in_' || g, (4000000000 - g)::oid::regclass, 10, '1s', '30s', 'poison', 'stand_in_' || g
FROM generate_series(1, 3000) g;
SELECT cmp_ok(pg_catalog.pg_relation_size('outbox.queues') / current_setting('block_size')::bigint, '>=', 40::bigint,
              'the registry spans many blocks');

SELECT cmp_ok(pg_temp.commit_step_blocks(:'q', 1, 1), '<=', 4::bigint,
              'a single-row producer''s commit step reads a few blocks of the registry, not all of them');
SELECT cmp_ok(pg_temp.commit_step_blocks(:'q', 5, 1), '<=', 4::bigint,
              'so does a producer of many rows in one statement');
SELECT cmp_ok(pg_temp.commit_step_blocks(:'q', 1, 3), '<=', 4::bigint,
              'and a producer of many statements');

SELECT * FROM finish();
ROLLBACK;
