-- The late-rows function takes a second argument (p_replace: made again in place by create_queue).
DROP FUNCTION outbox._late_rows_function(outbox.queues);
