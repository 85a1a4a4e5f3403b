package gocheck

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// errorsDocPath is the bad-input table this test generates and checks.
const errorsDocPath = "../docs/errors.md"

// badCall is one kind of bad argument to one public function.
type badCall struct {
	function, argument, sql string
}

// badCalls lists, for every public outbox function, every kind of bad argument. The fixture
// (errorsFixture) gives the calls something to be wrong about.
var badCalls = []badCall{
	{"create_queue", "queue is NULL", `SELECT outbox.create_queue(NULL)`},
	{"create_queue", "queue is not a plain name", `SELECT outbox.create_queue('public.q; DROP TABLE x')`},
	{"create_queue", "schema does not exist", `SELECT outbox.create_queue('nosuch.q')`},
	{"create_queue", "queue names a view", `SELECT outbox.create_queue('public.a_view')`},
	{"create_queue", "adopted table lacks columns", `SELECT outbox.create_queue('public.not_a_queue')`},
	{"create_queue", "adopted table's id is not the primary key", `SELECT outbox.create_queue('public.no_pk')`},
	{"create_queue", "partition_column is not a plain name", `SELECT outbox.create_queue('public.q', 'a b')`},
	{"create_queue", "partition_column is a queue column", `SELECT outbox.create_queue('public.q', 'id')`},
	{"create_queue", "partition_column is a system column", `SELECT outbox.create_queue('public.q', 'xmin')`},
	{"create_queue", "queue in a system schema", `SELECT outbox.create_queue('pg_catalog.q')`},
	{"create_queue", "partition_column missing from adopted table", `SELECT outbox.create_queue('public.adoptable', 'nosuch')`},
	{"create_queue", "partition_column has NULLs in adopted table", `SELECT outbox.create_queue('public.adoptable', 'k')`},
	{"create_queue", "partition_column of a registered queue changes", `SELECT outbox.create_queue('public.ev', NULL)`},
	{"create_queue", "partitioned table whose id has no sequence", `SELECT outbox.create_queue('public.no_seq', 'k')`},
	{"create_queue", "partition_column without one text per value", `SELECT outbox.create_queue('public.numeric_key', 'k')`},
	{"create_queue", "adopted table's pgdrain columns not as create_queue makes them", `SELECT outbox.create_queue('public.narrow_columns', 'k')`},
	{"create_queue", "table registered under another name", `SELECT outbox.create_queue('public.renamed', 'k')`},
	{"create_queue", "max_attempts out of range", `SELECT outbox.create_queue('public.q', max_attempts => 0)`},
	{"create_queue", "max_attempts is NULL", `SELECT outbox.create_queue('public.q', max_attempts => NULL)`},
	{"create_queue", "backoff_min not positive", `SELECT outbox.create_queue('public.q', backoff_min => '0 seconds')`},
	{"create_queue", "backoff_max below backoff_min", `SELECT outbox.create_queue('public.q', backoff_min => '10 seconds', backoff_max => '1 second')`},
	{"create_queue", "backoff_max over 1 day", `SELECT outbox.create_queue('public.q', backoff_max => '2 days')`},
	{"create_queue", "backoff_min over 1 day", `SELECT outbox.create_queue('public.q', backoff_min => '2 days')`},
	{"create_queue", "interval of mixed signs", `SELECT outbox.create_queue('public.q', backoff_max => '1 mon -29 days')`},
	{"create_queue", "queue in pgdrain's own schema", `SELECT outbox.create_queue('outbox.q')`},
	{"create_queue", "permanent_policy unknown", `SELECT outbox.create_queue('public.q', permanent_policy => 'drop')`},
	{"create_queue", "permanent_policy 'retry' with a partition column", `SELECT outbox.create_queue('public.q', 'k', permanent_policy => 'retry')`},
	{"create_queue", "channel is not a plain name", `SELECT outbox.create_queue('public.q', channel => 'a-b')`},
	{"create_queue", "max_delay below backoff_max", `SELECT outbox.create_queue('public.q', max_delay => '1 second')`},
	{"create_queue", "max_delay over 3650 days", `SELECT outbox.create_queue('public.q', max_delay => '3651 days')`},
	{"drop_queue", "queue is NULL", `SELECT outbox.drop_queue(NULL)`},
	{"drop_queue", "queue is not registered", `SELECT outbox.drop_queue('public.nosuch')`},
	{"drop_queue", "drop_table is NULL", `SELECT outbox.drop_queue('public.ev', NULL)`},
	{"set_notify", "notify unknown", `SELECT outbox.set_notify('public.ev', 'sometimes')`},
	{"set_notify", "notify is NULL", `SELECT outbox.set_notify('public.ev', NULL)`},
	{"set_notify", "queue is not registered", `SELECT outbox.set_notify('public.nosuch', 'always')`},
	{"enqueue", "queue is not registered", `SELECT outbox.enqueue('public.nosuch', 'e', '{}')`},
	{"enqueue", "event_type is empty", `SELECT outbox.enqueue('public.ev', ' ', '{}', 'k1')`},
	{"enqueue", "event_type is NULL", `SELECT outbox.enqueue('public.ev', NULL, '{}', 'k1')`},
	{"enqueue", "payload is NULL", `SELECT outbox.enqueue('public.ev', 'e', NULL, 'k1')`},
	{"enqueue", "payload is JSON null", `SELECT outbox.enqueue('public.ev', 'e', 'null', 'k1')`},
	{"enqueue", "partition_key missing on a partitioned queue", `SELECT outbox.enqueue('public.ev', 'e', '{}')`},
	{"enqueue", "partition_key is empty or blank", `SELECT outbox.enqueue('public.ev', 'e', '{}', ' ')`},
	{"enqueue", "partition_key given on an unpartitioned queue", `SELECT outbox.enqueue('public.plain', 'e', '{}', 'k1')`},
	{"enqueue", "deliver_at beyond the queue's max_delay", `SELECT outbox.enqueue('public.ev', 'e', '{}', 'k1', deliver_at => '2999-01-01 00:00:00+00')`},
	{"enqueue", "deliver_at infinite", `SELECT outbox.enqueue('public.ev', 'e', '{}', 'k1', deliver_at => 'infinity')`},
	{"enqueue", "headers not an object of strings", `SELECT outbox.enqueue('public.ev', 'e', '{}', 'k1', headers => '{"attempt": 1}')`},
	{"enqueue", "partition_key not a value of the key column", `SELECT outbox.enqueue('public.int_keyed', 'e', '{}', 'abc')`},
	{"enqueue_event", "queue is not registered", `SELECT * FROM outbox.enqueue_event('public.nosuch', 'e', '{}')`},
	{"enqueue_event", "event_type is blank", `SELECT * FROM outbox.enqueue_event('public.ev', E'\u3000', '{}', 'k1')`},
	{"enqueue_event", "payload is JSON null", `SELECT * FROM outbox.enqueue_event('public.ev', 'e', 'null', 'k1')`},
	{"enqueue_event", "partition_key missing on a partitioned queue", `SELECT * FROM outbox.enqueue_event('public.ev', 'e', '{}')`},
	{"enqueue_event", "deliver_at infinite", `SELECT * FROM outbox.enqueue_event('public.ev', 'e', '{}', 'k1', deliver_at => 'infinity')`},
	{"enqueue_event", "headers not an object", `SELECT * FROM outbox.enqueue_event('public.ev', 'e', '{}', 'k1', headers => '["a"]')`},
	{"claim_batch", "queue is not registered", `SELECT * FROM outbox.claim_batch('public.nosuch')`},
	{"claim_batch", "queue's table was dropped outside drop_queue", `SELECT * FROM outbox.claim_batch('public.dropped')`},
	{"claim_batch", "batch_size out of range", `SELECT * FROM outbox.claim_batch('public.ev', 0)`},
	{"claim_batch", "batch_size is NULL", `SELECT * FROM outbox.claim_batch('public.ev', NULL)`},
	{"claim_batch", "lease not positive", `SELECT * FROM outbox.claim_batch('public.ev', 10, '0 seconds')`},
	{"claim_batch", "lease over 1 day", `SELECT * FROM outbox.claim_batch('public.ev', 10, '25 hours')`},
	{"claim_batch", "lease of mixed signs", `SELECT * FROM outbox.claim_batch('public.ev', 10, '-12000 mons 360001 days')`},
	{"claim_runs", "queue is not registered", `SELECT * FROM outbox.claim_runs('public.nosuch')`},
	{"claim_runs", "batch_size out of range", `SELECT * FROM outbox.claim_runs('public.ev', 10001)`},
	{"claim_runs", "lease over 1 day", `SELECT * FROM outbox.claim_runs('public.ev', 32, '2 days')`},
	{"claim_runs", "run_length out of range", `SELECT * FROM outbox.claim_runs('public.ev', 32, '30 seconds', 0)`},
	{"claim_runs", "run_length is NULL", `SELECT * FROM outbox.claim_runs('public.ev', 32, '30 seconds', NULL)`},
	{"claim_locked", "queue is not registered", `SELECT * FROM outbox.claim_locked('public.nosuch')`},
	{"claim_locked", "batch_size out of range", `SELECT * FROM outbox.claim_locked('public.ev', 10001)`},
	{"claim_locked_runs", "queue is not registered", `SELECT * FROM outbox.claim_locked_runs('public.nosuch')`},
	{"claim_locked_runs", "batch_size out of range", `SELECT * FROM outbox.claim_locked_runs('public.ev', 0)`},
	{"claim_locked_runs", "run_length out of range", `SELECT * FROM outbox.claim_locked_runs('public.ev', 32, 1001)`},
	{"apply_result", "queue is not registered", `SELECT outbox.apply_result('public.nosuch', 1, gen_random_uuid(), 'sent')`},
	{"apply_result", "id is NULL", `SELECT outbox.apply_result('public.ev', NULL, gen_random_uuid(), 'sent')`},
	{"apply_result", "lease_token is NULL", `SELECT outbox.apply_result('public.ev', 1, NULL, 'sent')`},
	{"apply_result", "outcome unknown", `SELECT outbox.apply_result('public.ev', 1, gen_random_uuid(), 'ok')`},
	{"apply_result", "outcome is NULL", `SELECT outbox.apply_result('public.ev', 1, gen_random_uuid(), NULL)`},
	{"apply_result", "retry_at beyond the queue's max_delay", `SELECT outbox.apply_result('public.ev', 1, gen_random_uuid(), 'transient', NULL, '2999-01-01 00:00:00+00')`},
	{"apply_result", "retry_at with an outcome other than 'transient'", `SELECT outbox.apply_result('public.ev', 1, gen_random_uuid(), 'sent', NULL, now())`},
	{"apply_result", "retry_at infinite", `SELECT outbox.apply_result('public.ev', 1, gen_random_uuid(), 'transient', NULL, 'infinity')`},
	{"apply_results", "ids is NULL", `SELECT * FROM outbox.apply_results('public.ev', NULL, '{}', '{}')`},
	{"apply_results", "ids is multidimensional", `SELECT * FROM outbox.apply_results('public.ev', '{{1},{2}}', ARRAY[gen_random_uuid(), gen_random_uuid()], '{sent,sent}')`},
	{"apply_results", "lease_tokens is multidimensional", `SELECT * FROM outbox.apply_results('public.ev', '{1}', ARRAY[ARRAY[gen_random_uuid()]], '{sent}')`},
	{"apply_results", "outcomes is multidimensional", `SELECT * FROM outbox.apply_results('public.ev', '{1}', ARRAY[gen_random_uuid()], '{{sent}}')`},
	{"apply_results", "errors is multidimensional", `SELECT * FROM outbox.apply_results('public.ev', '{1}', ARRAY[gen_random_uuid()], '{sent}', '{{a}}')`},
	{"apply_results", "outcomes of another length", `SELECT * FROM outbox.apply_results('public.ev', '{1,2}', ARRAY[gen_random_uuid(), gen_random_uuid()], '{sent}')`},
	{"apply_results", "errors of another length", `SELECT * FROM outbox.apply_results('public.ev', '{1}', ARRAY[gen_random_uuid()], '{sent}', '{a,b}')`},
	{"apply_results", "lease_tokens of another length", `SELECT * FROM outbox.apply_results('public.ev', '{1,2}', ARRAY[gen_random_uuid()], '{sent,sent}')`},
	{"apply_results", "lease_tokens contain NULL", `SELECT * FROM outbox.apply_results('public.ev', '{1}', ARRAY[NULL::uuid], '{sent}')`},
	{"apply_results", "ids contain NULL", `SELECT * FROM outbox.apply_results('public.ev', '{1,NULL}', ARRAY[gen_random_uuid(), gen_random_uuid()], '{sent,sent}')`},
	{"apply_results", "ids repeat", `SELECT * FROM outbox.apply_results('public.ev', '{1,1}', ARRAY[gen_random_uuid(), gen_random_uuid()], '{sent,sent}')`},
	{"apply_results", "more than 10000 ids", `SELECT * FROM outbox.apply_results('public.ev', ARRAY(SELECT generate_series(1, 10001)::bigint), ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10001)), array_fill('sent'::text, ARRAY[10001]))`},
	{"apply_results", "outcome unknown", `SELECT * FROM outbox.apply_results('public.ev', '{1}', ARRAY[gen_random_uuid()], '{done}')`},
	{"apply_results", "retry_at of another length", `SELECT * FROM outbox.apply_results('public.ev', '{1}', ARRAY[gen_random_uuid()], '{transient}', NULL, ARRAY[now(), now()])`},
	{"apply_results", "retry_at beyond the queue's max_delay", `SELECT * FROM outbox.apply_results('public.ev', '{1,2}', ARRAY[gen_random_uuid(), gen_random_uuid()], '{transient,transient}', NULL, '{NULL,2999-01-01 00:00:00+00}')`},
	{"settle_locked", "queue is not registered", `SELECT outbox.settle_locked('public.nosuch', '{1}', '{sent}')`},
	{"settle_locked", "row not held by this transaction", `SELECT outbox.settle_locked('public.ev', '{1}', '{sent}')`},
	{"settle_locked", "outcomes of another length", `SELECT outbox.settle_locked('public.ev', '{1}', '{sent,sent}')`},
	{"settle_locked", "ids is multidimensional", `SELECT outbox.settle_locked('public.ev', '{{1}}', '{sent}')`},
	{"settle_locked", "outcome unknown", `SELECT outbox.settle_locked('public.ev', '{1}', '{retry}')`},
	{"settle_locked", "retry_at with an outcome other than 'transient'", `SELECT outbox.settle_locked('public.ev', '{1}', '{permanent}', NULL, ARRAY[now()])`},
	{"extend_lease", "queue is not registered", `SELECT outbox.extend_lease('public.nosuch', 1, gen_random_uuid(), '1 minute')`},
	{"extend_lease", "id is NULL", `SELECT outbox.extend_lease('public.ev', NULL, gen_random_uuid(), '1 minute')`},
	{"extend_lease", "lease_token is NULL", `SELECT outbox.extend_lease('public.ev', 1, NULL, '1 minute')`},
	{"extend_lease", "lease not positive", `SELECT outbox.extend_lease('public.ev', 1, gen_random_uuid(), '-1 minute')`},
	{"release", "queue is not registered", `SELECT outbox.release('public.nosuch', 1, gen_random_uuid())`},
	{"release", "id is NULL", `SELECT outbox.release('public.ev', NULL, gen_random_uuid())`},
	{"release", "lease_token is NULL", `SELECT outbox.release('public.ev', 1, NULL)`},
	{"drainer_waits", "queue is not registered", `SELECT outbox.drainer_waits('public.nosuch', '1 second')`},
	{"drainer_waits", "wait not positive", `SELECT outbox.drainer_waits('public.ev', '0 seconds')`},
	{"drainer_waits", "wait is NULL", `SELECT outbox.drainer_waits('public.ev', NULL)`},
	{"drainer_waits", "wait over 1 day", `SELECT outbox.drainer_waits('public.ev', '2 days')`},
	{"drainer_waits", "wait of mixed signs", `SELECT outbox.drainer_waits('public.ev', '-12000 mons 360001 days')`},
	{"drainer_waits", "queue without its marks' sequence", `SELECT outbox.drainer_waits('public.no_marks', '1 second')`},
	{"drainer_woke", "queue is not registered", `SELECT outbox.drainer_woke('public.nosuch', 1)`},
	{"drainer_woke", "mark negative", `SELECT outbox.drainer_woke('public.ev', -1)`},
	{"drainer_woke", "mark is NULL", `SELECT outbox.drainer_woke('public.ev', NULL)`},
	{"claim_turn", "queue is not registered", `SELECT outbox.claim_turn('public.nosuch', '1 second')`},
	{"claim_turn", "pause not positive", `SELECT outbox.claim_turn('public.ev', '0 seconds')`},
	{"claim_turn", "pause over 10 seconds", `SELECT outbox.claim_turn('public.ev', '11 seconds')`},
	{"claim_turn", "pause of mixed signs", `SELECT outbox.claim_turn('public.ev', '1 mon -30 days')`},
	{"stats", "queue is NULL", `SELECT * FROM outbox.stats(NULL)`},
	{"stats", "queue is not registered", `SELECT * FROM outbox.stats('public.nosuch')`},
	{"queue_info", "queue is NULL", `SELECT * FROM outbox.queue_info(NULL)`},
	{"queue_info", "queue is not a plain name", `SELECT * FROM outbox.queue_info('a b')`},
	{"queue_info", "queue is not registered", `SELECT * FROM outbox.queue_info('public.nosuch')`},
	{"next_due", "queue is NULL", `SELECT outbox.next_due(NULL)`},
	{"next_due", "queue is not registered", `SELECT outbox.next_due('public.nosuch')`},
	{"heads_rebuild", "queue is NULL", `SELECT * FROM outbox.heads_rebuild(NULL)`},
	{"heads_rebuild", "queue is not a plain name", `SELECT * FROM outbox.heads_rebuild('a b')`},
	{"heads_rebuild", "queue is not registered", `SELECT * FROM outbox.heads_rebuild('public.nosuch')`},
	{"wedged_partitions", "queue is not registered", `SELECT * FROM outbox.wedged_partitions('public.nosuch', '1 minute')`},
	{"wedged_partitions", "queue has no partition column", `SELECT * FROM outbox.wedged_partitions('public.plain', '1 minute')`},
	{"wedged_partitions", "older_than negative", `SELECT * FROM outbox.wedged_partitions('public.ev', '-1 minute')`},
	{"wedged_partitions", "older_than past the clock's range", `SELECT * FROM outbox.wedged_partitions('public.ev', '5000 years')`},
	{"wedged_partitions", "max_partitions out of range", `SELECT * FROM outbox.wedged_partitions('public.ev', '1 minute', 0)`},
	{"check_indexes", "queue is not registered", `SELECT * FROM outbox.check_indexes('public.nosuch')`},
	{"check_indexes", "queue is not a plain name", `SELECT * FROM outbox.check_indexes('public.ev--')`},
	{"repair", "queue is not registered", `SELECT * FROM outbox.repair('public.nosuch')`},
	{"repair", "dry_run is NULL", `SELECT * FROM outbox.repair('public.ev', NULL)`},
	{"requeue_poisoned", "queue is not registered", `SELECT outbox.requeue_poisoned('public.nosuch')`},
	{"requeue_poisoned", "ids contain NULL", `SELECT outbox.requeue_poisoned('public.ev', '{1,NULL}')`},
	{"requeue_poisoned", "ids is multidimensional", `SELECT outbox.requeue_poisoned('public.ev', '{{1},{2}}')`},
	{"poisoned_rows", "queue is not registered", `SELECT * FROM outbox.poisoned_rows('public.nosuch')`},
	{"poisoned_rows", "max_rows out of range", `SELECT * FROM outbox.poisoned_rows('public.ev', 0)`},
	{"poisoned_rows", "max_rows is NULL", `SELECT * FROM outbox.poisoned_rows('public.ev', NULL)`},
	{"release_lease", "queue is not registered", `SELECT outbox.release_lease('public.nosuch', 1)`},
	{"release_lease", "id is NULL", `SELECT outbox.release_lease('public.ev', NULL)`},
	{"release_lease", "leased_until infinite", `SELECT outbox.release_lease('public.ev', 1, 'infinity')`},
	{"purge_sent", "queue is not registered", `SELECT outbox.purge_sent('public.nosuch')`},
	{"purge_sent", "older_than negative", `SELECT outbox.purge_sent('public.ev', '-1 day')`},
	{"purge_sent", "older_than past the clock's range", `SELECT outbox.purge_sent('public.ev', '5000 years')`},
	{"purge_sent", "max_rows out of range", `SELECT outbox.purge_sent('public.ev', '1 day', 0)`},
	{"poison_row", "queue is not registered", `SELECT outbox.poison_row('public.nosuch', 1, 0, 'r')`},
	{"poison_row", "id is NULL", `SELECT outbox.poison_row('public.ev', NULL, 0, 'r')`},
	{"poison_row", "attempt_count is NULL", `SELECT outbox.poison_row('public.ev', 1, NULL, 'r')`},
	{"poison_row", "reason is blank", `SELECT outbox.poison_row('public.ev', 1, 0, ' ')`},
	{"retry_row", "id is NULL", `SELECT outbox.retry_row('public.ev', NULL, 0)`},
	{"retry_row", "attempt_count negative", `SELECT outbox.retry_row('public.ev', 1, -1)`},
	{"retry_row", "reason is blank", `SELECT outbox.retry_row('public.ev', 1, 0, '')`},
	{"dismiss_poisoned", "ids is NULL", `SELECT outbox.dismiss_poisoned('public.ev', NULL, 'r')`},
	{"dismiss_poisoned", "ids contains NULL", `SELECT outbox.dismiss_poisoned('public.ev', '{1,NULL}', 'r')`},
	{"dismiss_poisoned", "reason is NULL", `SELECT outbox.dismiss_poisoned('public.ev', '{1}', NULL)`},
	{"operator_log", "queue is not a plain name", `SELECT * FROM outbox.operator_log('a b')`},
	{"operator_log", "max_rows out of range", `SELECT * FROM outbox.operator_log('public.ev', 0)`},
}

// alrBadCalls lists, for every public alr function that takes an argument, every kind of bad
// argument. The fixture (errorsFixture) gives the calls something to be wrong about.
var alrBadCalls = []badCall{
	{"create_policy", "name is NULL", `SELECT alr.create_policy(NULL, '[{"delay": "0s", "channel": "telegram", "target": "@oncall"}]')`},
	{"create_policy", "name is blank", `SELECT alr.create_policy(' ', '[{"delay": "0s", "channel": "telegram", "target": "@oncall"}]')`},
	{"create_policy", "name over 200 characters", `SELECT alr.create_policy(repeat('p', 201), '[{"delay": "0s", "channel": "telegram", "target": "@oncall"}]')`},
	{"create_policy", "steps is NULL", `SELECT alr.create_policy('on call', NULL)`},
	{"create_policy", "steps not an array", `SELECT alr.create_policy('on call', '{}')`},
	{"create_policy", "steps empty", `SELECT alr.create_policy('on call', '[]')`},
	{"create_policy", "more than 100 steps", `SELECT alr.create_policy('on call', (SELECT jsonb_agg('{"delay": "0s", "channel": "telegram", "target": "@oncall"}'::jsonb) FROM generate_series(1, 101)))`},
	{"create_policy", "a step not an object", `SELECT alr.create_policy('on call', '[1]')`},
	{"create_policy", "a step with another key", `SELECT alr.create_policy('on call', '[{"delay": "0s", "channel": "telegram", "target": "@oncall", "to": "x"}]')`},
	{"create_policy", "delay missing", `SELECT alr.create_policy('on call', '[{"channel": "telegram", "target": "@oncall"}]')`},
	{"create_policy", "delay not an interval", `SELECT alr.create_policy('on call', '[{"delay": "soon", "channel": "telegram", "target": "@oncall"}]')`},
	{"create_policy", "delay negative", `SELECT alr.create_policy('on call', '[{"delay": "-1 minute", "channel": "telegram", "target": "@oncall"}]')`},
	{"create_policy", "delay of mixed signs", `SELECT alr.create_policy('on call', '[{"delay": "1 mon -29 days", "channel": "telegram", "target": "@oncall"}]')`},
	{"create_policy", "delay over 3650 days", `SELECT alr.create_policy('on call', '[{"delay": "3651 days", "channel": "telegram", "target": "@oncall"}]')`},
	{"create_policy", "channel missing", `SELECT alr.create_policy('on call', '[{"delay": "0s", "target": "@oncall"}]')`},
	{"create_policy", "channel blank", `SELECT alr.create_policy('on call', '[{"delay": "0s", "channel": " ", "target": "@oncall"}]')`},
	{"create_policy", "channel over 200 characters", `SELECT alr.create_policy('on call', jsonb_build_array(jsonb_build_object('delay', '0s', 'channel', repeat('c', 201), 'target', '@oncall')))`},
	{"create_policy", "target not a string (in the second step)", `SELECT alr.create_policy('on call', '[{"delay": "0s", "channel": "telegram", "target": "@oncall"}, {"delay": "5 minutes", "channel": "telegram", "target": 1}]')`},
	{"create_policy", "target over 1000 characters", `SELECT alr.create_policy('on call', jsonb_build_array(jsonb_build_object('delay', '0s', 'channel', 'telegram', 'target', repeat('t', 1001))))`},
	{"add_alert", "name is NULL", `SELECT alr.add_alert(NULL)`},
	{"add_alert", "name is blank", `SELECT alr.add_alert(' ')`},
	{"add_alert", "name over 1000 characters", `SELECT alr.add_alert(repeat('n', 1001))`},
	{"start_escalation", "alert_id is NULL", `SELECT alr.start_escalation(NULL, '00000000-0000-4000-8000-0000000000b1')`},
	{"start_escalation", "policy_id is NULL", `SELECT alr.start_escalation('00000000-0000-4000-8000-0000000000a1', NULL)`},
	{"start_escalation", "alert_id names no alert", `SELECT alr.start_escalation('00000000-0000-0000-0000-000000000000', '00000000-0000-4000-8000-0000000000b1')`},
	{"start_escalation", "alert is resolved", `SELECT alr.start_escalation('00000000-0000-4000-8000-0000000000a3', '00000000-0000-4000-8000-0000000000b1')`},
	{"start_escalation", "alert is acknowledged", `SELECT alr.start_escalation('00000000-0000-4000-8000-0000000000a2', '00000000-0000-4000-8000-0000000000b1')`},
	{"start_escalation", "policy_id names no policy", `SELECT alr.start_escalation('00000000-0000-4000-8000-0000000000a1', '00000000-0000-0000-0000-000000000000')`},
	{"take_due_steps", "batch_size out of range", `SELECT * FROM alr.take_due_steps(0)`},
	{"take_due_steps", "batch_size is NULL", `SELECT * FROM alr.take_due_steps(NULL)`},
	{"take_due_steps", "lease not positive", `SELECT * FROM alr.take_due_steps(100, '0 seconds')`},
	{"take_due_steps", "lease over 1 day", `SELECT * FROM alr.take_due_steps(100, '25 hours')`},
	{"take_due_steps", "lease of mixed signs", `SELECT * FROM alr.take_due_steps(100, '-12000 mons 360001 days')`},
	{"apply_escalation", "escalation_id is NULL", `SELECT alr.apply_escalation(NULL, '00000000-0000-4000-8000-0000000000c1')`},
	{"apply_escalation", "lease_token is NULL", `SELECT alr.apply_escalation('00000000-0000-4000-8000-0000000000e1', NULL)`},
	{"apply_escalation", "escalation_id names no escalation", `SELECT alr.apply_escalation('00000000-0000-0000-0000-000000000000', '00000000-0000-4000-8000-0000000000c1')`},
	{"record_delivery", "escalation_id is NULL", `SELECT alr.record_delivery(NULL, 0, '00000000-0000-4000-8000-0000000000c1')`},
	{"record_delivery", "lease_token is NULL", `SELECT alr.record_delivery('00000000-0000-4000-8000-0000000000e2', 0, NULL)`},
	{"record_delivery", "escalation_id names no escalation", `SELECT alr.record_delivery('00000000-0000-0000-0000-000000000000', 0, '00000000-0000-4000-8000-0000000000c1')`},
	{"record_delivery", "step_idx is NULL", `SELECT alr.record_delivery('00000000-0000-4000-8000-0000000000e2', NULL, '00000000-0000-4000-8000-0000000000c1')`},
	{"record_delivery", "step_idx negative", `SELECT alr.record_delivery('00000000-0000-4000-8000-0000000000e2', -1, '00000000-0000-4000-8000-0000000000c1')`},
	{"record_delivery", "step_idx not recorded yet", `SELECT alr.record_delivery('00000000-0000-4000-8000-0000000000e2', 1, '00000000-0000-4000-8000-0000000000c1')`},
	{"record_delivery", "no step recorded yet", `SELECT alr.record_delivery('00000000-0000-4000-8000-0000000000e1', 0, '00000000-0000-4000-8000-0000000000c1')`},
	{"record_delivery", "error is blank", `SELECT alr.record_delivery('00000000-0000-4000-8000-0000000000e2', 0, '00000000-0000-4000-8000-0000000000c1', E' \t')`},
	{"recorded_by", "escalation_id is NULL", `SELECT alr.recorded_by(NULL, '00000000-0000-4000-8000-0000000000c1')`},
	{"recorded_by", "lease_token is NULL", `SELECT alr.recorded_by('00000000-0000-4000-8000-0000000000e2', NULL)`},
	{"recorded_by", "escalation_id names no escalation", `SELECT alr.recorded_by('00000000-0000-0000-0000-000000000000', '00000000-0000-4000-8000-0000000000c1')`},
	{"release_step", "escalation_id is NULL", `SELECT alr.release_step(NULL, '00000000-0000-4000-8000-0000000000c1')`},
	{"release_step", "lease_token is NULL", `SELECT alr.release_step('00000000-0000-4000-8000-0000000000e1', NULL)`},
	{"release_step", "escalation_id names no escalation", `SELECT alr.release_step('00000000-0000-0000-0000-000000000000', '00000000-0000-4000-8000-0000000000c1')`},
	{"alert_name", "alert_id is NULL", `SELECT alr.alert_name(NULL)`},
	{"acknowledge_alert", "alert_id is NULL", `SELECT alr.acknowledge_alert(NULL)`},
	{"acknowledge_alert", "alert_id names no alert", `SELECT alr.acknowledge_alert('00000000-0000-0000-0000-000000000000')`},
	{"acknowledge_alert", "note is blank", `SELECT alr.acknowledge_alert('00000000-0000-4000-8000-0000000000a1', ' ')`},
	{"acknowledge_alert", "note over 1000 characters", `SELECT alr.acknowledge_alert('00000000-0000-4000-8000-0000000000a1', repeat('n', 1001))`},
	{"resolve_alert", "alert_id is NULL", `SELECT alr.resolve_alert(NULL)`},
	{"resolve_alert", "alert_id names no alert", `SELECT alr.resolve_alert('00000000-0000-0000-0000-000000000000')`},
	{"resolved_alerts", "max_rows out of range", `SELECT * FROM alr.resolved_alerts(0)`},
	{"resolved_alerts", "max_rows over 1000", `SELECT * FROM alr.resolved_alerts(1001)`},
	{"resolved_alerts", "max_rows is NULL", `SELECT * FROM alr.resolved_alerts(NULL)`},
	{"unjournaled_steps", "older_than is NULL", `SELECT * FROM alr.unjournaled_steps(NULL)`},
	{"unjournaled_steps", "older_than negative", `SELECT * FROM alr.unjournaled_steps('-1 minute')`},
	{"unjournaled_steps", "older_than over 366 days", `SELECT * FROM alr.unjournaled_steps('367 days')`},
	{"unjournaled_steps", "older_than mixes signs", `SELECT * FROM alr.unjournaled_steps('1 mon -40 days')`},
}

// schemaBadCall is a bad call with the schema of its function.
type schemaBadCall struct {
	schema string
	badCall
}

// allBadCalls returns the bad calls of both schemas in the order of docs/errors.md: outbox, then alr.
func allBadCalls() []schemaBadCall {
	var out []schemaBadCall
	for _, s := range []struct {
		schema string
		calls  []badCall
	}{{"outbox", badCalls}, {"alr", alrBadCalls}} {
		for _, c := range s.calls {
			out = append(out, schemaBadCall{s.schema, c})
		}
	}
	return out
}

func errorsFixture(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), `
		SELECT outbox.create_queue('public.ev', 'k', max_attempts => 3);
		SELECT outbox.create_queue('public.plain');
		SELECT outbox.enqueue('public.ev', 'created', '{}', 'k1');
		CREATE VIEW public.a_view AS SELECT 1 AS x;
		CREATE TABLE public.not_a_queue (x int);
		CREATE TABLE public.no_pk (id bigint, event_type text, payload jsonb, created_at timestamptz);
		CREATE TABLE public.adoptable (id bigint PRIMARY KEY, event_type text NOT NULL, payload jsonb NOT NULL,
		                               created_at timestamptz NOT NULL DEFAULT now(), k text);
		INSERT INTO public.adoptable (id, event_type, payload) VALUES (1, 'e', '{}');
		CREATE TABLE public.no_seq (id bigint PRIMARY KEY, event_type text NOT NULL, payload jsonb NOT NULL,
		                            created_at timestamptz NOT NULL DEFAULT now(), k text NOT NULL);
		CREATE TABLE public.numeric_key (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, event_type text NOT NULL,
		                                 payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), k numeric NOT NULL);
		CREATE TABLE public.narrow_columns (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, event_type text NOT NULL,
		                                    payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), k text NOT NULL,
		                                    attempt_count bigint NOT NULL DEFAULT 0, last_error varchar(200), sent_at timestamptz DEFAULT now());
		SELECT outbox.create_queue('public.renamed_from', 'k');
		ALTER TABLE public.renamed_from RENAME TO renamed;
		SELECT outbox.create_queue('public.dropped');
		DROP TABLE public.dropped;
		CREATE TABLE public.int_keyed (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, event_type text NOT NULL,
		                               payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), k bigint NOT NULL);
		SELECT outbox.create_queue('public.int_keyed', 'k');
		SELECT outbox.create_queue('public.no_marks');
		DO $$ BEGIN
		  EXECUTE format('DROP SEQUENCE outbox.drainer_waits_q%s', (SELECT queue_id FROM outbox.queues WHERE queue = 'public.no_marks'));
		END $$;
		INSERT INTO alr.escalation_policies (id, name) VALUES ('00000000-0000-4000-8000-0000000000b1', 'on call');
		INSERT INTO alr.escalation_steps (policy_id, step_idx, delay, channel, target)
		VALUES ('00000000-0000-4000-8000-0000000000b1', 0, '0s', 'telegram', '@oncall'), ('00000000-0000-4000-8000-0000000000b1', 1, '5 minutes', 'telegram', '@lead');
		INSERT INTO alr.alerts (id, name) VALUES ('00000000-0000-4000-8000-0000000000a1', 'disk full'), ('00000000-0000-4000-8000-0000000000a2', 'acknowledged'), ('00000000-0000-4000-8000-0000000000a4', 'cpu hot');
		INSERT INTO alr.alerts (id, name, state, resolved_at) VALUES ('00000000-0000-4000-8000-0000000000a3', 'resolved', 'resolved', now());
		INSERT INTO alr.alert_acknowledgements (alert_id) VALUES ('00000000-0000-4000-8000-0000000000a2');
		INSERT INTO alr.alert_escalations (id, alert_id, policy_id, step_idx, next_at) VALUES ('00000000-0000-4000-8000-0000000000e1', '00000000-0000-4000-8000-0000000000a1', '00000000-0000-4000-8000-0000000000b1', 0, now());
		INSERT INTO alr.alert_escalations (id, alert_id, policy_id, step_idx, next_at, applied_tokens)
		VALUES ('00000000-0000-4000-8000-0000000000e2', '00000000-0000-4000-8000-0000000000a4', '00000000-0000-4000-8000-0000000000b1', 1, now() + interval '5 minutes', ARRAY['00000000-0000-4000-8000-0000000000c1'::uuid]);`)
	require.NoError(t, err)
	return db
}

// TestErrorsDoc runs every bad call, checks that it fails and changes nothing, and renders the
// SQLSTATE and message of each into docs/errors.md. The test fails when the file differs from
// what the functions say; UPDATE_ERRORS_DOC=1 rewrites it.
func TestErrorsDoc(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := errorsFixture(t)

	var doc strings.Builder
	doc.WriteString("# Bad input: error codes and messages\n\n")
	doc.WriteString("For developers who handle pgdrain's errors in their clients and workers.\n\n")
	doc.WriteString("Generated by `gocheck/errors_doc_test.go` from the functions themselves: the test runs every\n")
	doc.WriteString("call below against a real database and fails when this file differs " +
		"(`UPDATE_ERRORS_DOC=1 go test ./gocheck -run TestErrorsDoc` rewrites it).\n")
	doc.WriteString("Every call here fails and changes nothing (the test compares a fingerprint of the whole state).\n\n")
	doc.WriteString("SQLSTATEs: `22023` invalid argument (message `<function>: <argument> must ..., got <value>`), " +
		"`42P01` queue not registered (or its table dropped outside drop_queue), `3F000` schema missing, `55000` row not held (lock mode) or the queue's marks' sequence missing (drainer_waits), " +
		"`42501` the caller's role may not call the function (see docs/security.md), " +
		"`P0002` an id of schema alr names no alert, policy or escalation.\n\n")
	doc.WriteString("The calls run against a fixture: outbox queues `public.ev` (partitioned by `k`) and `public.plain` " +
		"(not partitioned), among others; in schema alr (the escalation ladder, docs/escalation.md), policy `…b1` (two steps), alert `…a1` firing with ladder `…e1` " +
		"at step 0, alert `…a4` firing with ladder `…e2` " +
		"at step 1 (step 0 recorded with token `…c1`), alert `…a2` acknowledged, " +
		"alert `…a3` resolved (ids `00000000-0000-4000-8000-0000000000xx`), and the nil uuid, which names nothing.\n")
	// Every public function that takes an argument has a section (TestErrorsDoc_EveryPublicFunctionHasBadCalls);
	// the others are named here, so that the page lists every public function.
	_, withoutArguments := publicFunctions(t, db.Pool)
	fmt.Fprintf(&doc, "\nFunctions that take no argument, so have no bad input: `%s()`.\n", strings.Join(withoutArguments, "()`, `"))
	before := errorsDocFingerprint(t, db.Pool)
	last := ""
	for _, c := range allBadCalls() {
		if c.schema+"."+c.function != last {
			fmt.Fprintf(&doc, "\n## %s.%s\n\n| bad argument | SQLSTATE | message | call |\n|---|---|---|---|\n", c.schema, c.function)
			last = c.schema + "." + c.function
		}
		_, err := db.Pool.Exec(ctx, c.sql)
		require.Error(t, err, "%s: %s must fail: %s", c.function, c.argument, c.sql)
		code, msg := sqlState(err)
		require.NotEmpty(t, code, "%s: %s: not a server error: %v", c.function, c.argument, err)
		require.True(t, strings.HasPrefix(msg, c.function+": "), "%s: %s: message must name the function: %q", c.function, c.argument, msg)
		require.Equal(t, before, errorsDocFingerprint(t, db.Pool), "%s.%s: %s changed something", c.schema, c.function, c.argument)
		fmt.Fprintf(&doc, "| %s | `%s` | %s | `%s` |\n", c.argument, code, mdCell(msg), mdCell(c.sql))
	}

	want := doc.String()
	if os.Getenv("UPDATE_ERRORS_DOC") == "1" {
		require.NoError(t, os.WriteFile(errorsDocPath, []byte(want), 0o644))
		return
	}
	got, err := os.ReadFile(errorsDocPath)
	require.NoError(t, err, "run UPDATE_ERRORS_DOC=1 go test ./gocheck -run TestErrorsDoc")
	require.Equal(t, want, string(got),
		"docs/errors.md is out of date: run UPDATE_ERRORS_DOC=1 go test ./gocheck -run TestErrorsDoc and review the diff")
}

// errorsDocFingerprint hashes what a bad call of either schema could change: stateFingerprint (the
// registry, the queue tables' rows, relations, triggers, outbox functions, roles), alrFingerprint
// (alr's rows and ACLs), and besides them every row of every table of schemas outbox and alr and
// the position of every sequence of outbox, alr and public (claim turns and drainers' marks are
// sequences, and a sequence is not rolled back with the call that moved it).
func errorsDocFingerprint(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT c.oid::regclass::text, c.relkind = 'S' FROM pg_class c
		WHERE c.relnamespace IN ('outbox'::regnamespace, 'alr'::regnamespace) AND c.relkind IN ('r', 'p')
		   OR c.relnamespace IN ('outbox'::regnamespace, 'alr'::regnamespace, 'public'::regnamespace) AND c.relkind = 'S'
		ORDER BY 1`)
	require.NoError(t, err)
	type relation struct {
		Name     string
		Sequence bool
	}
	relations, err := pgx.CollectRows(rows, pgx.RowToStructByPos[relation])
	require.NoError(t, err)
	parts := []string{stateFingerprint(t, pool), alrFingerprint(t, pool)}
	for _, r := range relations {
		q := fmt.Sprintf(`SELECT md5(COALESCE(string_agg(to_jsonb(t)::text, ',' ORDER BY to_jsonb(t)::text), '')) FROM %s t`, r.Name)
		if r.Sequence {
			q = fmt.Sprintf(`SELECT last_value || ':' || is_called FROM %s`, r.Name)
		}
		var h string
		require.NoError(t, pool.QueryRow(ctx, q).Scan(&h))
		parts = append(parts, r.Name+"="+h)
	}
	return fmt.Sprint(parts)
}

func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// publicFunctions returns the public functions of schemas outbox and alr, as "schema.name", split
// by whether they take an argument. Public is what the privilege tests
// (TestSecurity_EveryFunctionHasItsDecidedPrivileges, TestEscalation_EveryAlrFunctionHasItsDecidedPrivileges)
// call public: every function whose name does not start with "_" (internal helpers, and the
// statements outbox._prepared keeps), except trigger functions, which no client calls.
func publicFunctions(t *testing.T, pool *pgxpool.Pool) (withArguments, withoutArguments []string) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT n.nspname || '.' || p.proname, bool_or(p.pronargs > 0)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname IN ('outbox', 'alr') AND p.proname !~ '^_' AND p.prorettype <> 'trigger'::regtype
		GROUP BY 1 ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var name string
		var arguments bool
		require.NoError(t, rows.Scan(&name, &arguments))
		if arguments {
			withArguments = append(withArguments, name)
		} else {
			withoutArguments = append(withoutArguments, name)
		}
	}
	require.NoError(t, rows.Err())
	return withArguments, withoutArguments
}

// Every public function of schemas outbox and alr that takes an argument has its bad calls in
// docs/errors.md, each function's in one section; every section names a public function. A
// function added later without them fails here.
func TestErrorsDoc_EveryPublicFunctionHasBadCalls(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	withArguments, _ := publicFunctions(t, db.Pool)
	require.NotEmpty(t, withArguments)

	documented := map[string]bool{}
	last := ""
	for _, c := range allBadCalls() {
		name := c.schema + "." + c.function
		if name != last {
			require.False(t, documented[name], "%s: its bad calls must be listed together (one section)", name)
			documented[name] = true
			last = name
		}
	}
	var missing []string
	for _, name := range withArguments {
		if !documented[name] {
			missing = append(missing, name)
		}
		delete(documented, name)
	}
	require.Empty(t, missing, "public functions without bad calls in gocheck/errors_doc_test.go (and docs/errors.md)")
	require.Empty(t, documented, "bad calls of functions that are not public functions taking an argument")
}
