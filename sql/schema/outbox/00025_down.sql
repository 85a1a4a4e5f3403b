ALTER TABLE outbox.partition_heads ALTER COLUMN queue_id RESET (n_distinct),
  ALTER COLUMN partition_key RESET (n_distinct);
ALTER TABLE outbox.partition_clocks ALTER COLUMN queue_id RESET (n_distinct),
  ALTER COLUMN slot RESET (n_distinct);
ALTER TABLE outbox.commit_hooks DROP COLUMN more_notes;
COMMENT ON COLUMN outbox.commit_hooks.keys IS
  'SERIALIZABLE transactions only: the key and id of every row written, and its table (aligned); others note in outbox.commit_notes.';
DROP FUNCTION outbox.claim_runs(text, integer, interval, integer);
DROP FUNCTION outbox.claim_locked_runs(text, integer, integer);
DROP FUNCTION outbox._claim_batch(text, text, integer, interval, integer);
DROP FUNCTION outbox._claim_locked(text, text, integer, integer);
DROP FUNCTION outbox._claim(outbox.queues, integer, interval, text, integer);
DROP FUNCTION outbox._claim_run(outbox.queues, bigint[], text[], integer, integer, timestamptz, timestamptz, text);
DROP FUNCTION outbox._check_run_length(text, integer);
DROP FUNCTION outbox._locked_here(outbox.queues, bigint[]);
DROP FUNCTION outbox.version();
DROP FUNCTION outbox.claim_turn(text, interval);
DROP FUNCTION outbox.poison_row(text, bigint, integer, text);
DROP FUNCTION outbox.retry_row(text, bigint, integer, text);
DROP FUNCTION outbox.dismiss_poisoned(text, bigint[], text);
DROP FUNCTION outbox.operator_log(text, integer, bigint);
DROP FUNCTION outbox._operator_act(outbox.queues, text, bigint[], integer, text);
DROP FUNCTION outbox._check_reason(text, text);
DROP FUNCTION outbox._payload_check();
DROP FUNCTION outbox._forget_kept_statements();
DROP FUNCTION outbox._drop_functions(text);
DROP TABLE outbox.operator_actions;
DROP FUNCTION outbox.create_queue(text, text, integer, interval, interval, text, text, interval);
DROP FUNCTION outbox.queue_info(text);
DROP FUNCTION outbox._check_delay(text, text, outbox.queues, timestamptz[], boolean);
DROP FUNCTION outbox._guard_next_attempt_at(regclass, interval, boolean, boolean);
ALTER TABLE outbox.queues DROP COLUMN max_delay;
ALTER TABLE outbox.queues ALTER COLUMN table_oid TYPE oid USING table_oid::oid;
COMMENT ON COLUMN outbox.queues.table_oid IS NULL;
DROP FUNCTION outbox._make_head(integer, text, bigint, bigint);
