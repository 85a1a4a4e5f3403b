#!/usr/bin/env bash
# A pgdrain worker in plain psql and bash: it leases a batch with outbox.claim_batch, delivers
# each event with a command of your choice, and records the outcome with outbox.apply_result.
# Everything that decides correctness (order per key, fencing, backoff, poison) happens in the
# SQL functions; this loop only moves data.
#
#   DATABASE_URL=postgres://... QUEUE=public.events DELIVER_CMD=./deliver.sh examples/psql/worker.sh
#
# DELIVER_CMD gets the payload (jsonb text) on stdin and EVENT_ID, EVENT_TYPE, PARTITION_KEY and
# ATTEMPT in its environment. Its exit status is the outcome: 0 = sent, 75 (EX_TEMPFAIL) =
# transient (retried with backoff), anything else = permanent (the event is poisoned). The first
# line it writes to stderr becomes last_error.
#
# Settings (environment): QUEUE (required), DELIVER_CMD (default: print the event), BATCH (10),
# LEASE (30 seconds; must cover a whole batch of deliveries), IDLE_SLEEP (1 second),
# DRAIN_UNTIL_EMPTY=1 to exit once the queue has nothing pending (poisoned rows do not count).
set -euo pipefail

: "${DATABASE_URL:?set DATABASE_URL}"
: "${QUEUE:?set QUEUE (schema.table of a queue made with outbox.create_queue)}"
DELIVER_CMD=${DELIVER_CMD:-}
BATCH=${BATCH:-10}
LEASE=${LEASE:-30 seconds}
IDLE_SLEEP=${IDLE_SLEEP:-1}
DRAIN_UNTIL_EMPTY=${DRAIN_UNTIL_EMPTY:-0}

# Every query goes through stdin so psql substitutes the :'variables' safely (psql -c does not).
# Fields are separated by the ASCII unit separator: unlike a tab it never collapses empty fields,
# and jsonb's text form never contains it unescaped.
sql() {
  psql "$DATABASE_URL" -X -q -A -t -F $'\x1f' -v ON_ERROR_STOP=1 -v queue="$QUEUE" "$@"
}

deliver() { # stdin: payload; env: EVENT_*; prints the error text on failure
  if [ -z "$DELIVER_CMD" ]; then
    printf 'event %s (%s, key %s, attempt %s): %s\n' "$EVENT_ID" "$EVENT_TYPE" "$PARTITION_KEY" "$ATTEMPT" "$(cat)"
    return 0
  fi
  $DELIVER_CMD
}

while true; do
  batch=$(sql -v batch="$BATCH" -v lease="$LEASE" <<'SQL'
SELECT id, lease_token, event_type, partition_key, attempt_count, payload
FROM outbox.claim_batch(:'queue', :'batch'::int, :'lease'::interval);
SQL
)
  if [ -z "$batch" ]; then
    if [ "$DRAIN_UNTIL_EMPTY" = 1 ]; then
      pending=$(sql <<'SQL'
SELECT pending FROM outbox.stats(:'queue');
SQL
)
      [ "$pending" = 0 ] && exit 0
    fi
    sleep "$IDLE_SLEEP"
    continue
  fi

  while IFS=$'\x1f' read -r id token event_type key attempt payload; do
    errfile=$(mktemp)
    set +e
    printf '%s' "$payload" | EVENT_ID=$id EVENT_TYPE=$event_type PARTITION_KEY=$key ATTEMPT=$attempt \
      deliver 2>"$errfile"
    status=$?
    set -e
    case $status in
      0) outcome=sent ;;
      75) outcome=transient ;;
      *) outcome=permanent ;;
    esac
    err=$(head -n 1 "$errfile"); rm -f "$errfile"
    [ "$outcome" != sent ] && [ -z "$err" ] && err="DELIVER_CMD exited with $status"
    # false = our lease expired and someone else holds the row now: nothing was written, and the
    # new holder delivers it. Leases are time; the token is ownership.
    applied=$(sql -v id="$id" -v token="$token" -v outcome="$outcome" -v err="$err" <<'SQL'
SELECT outbox.apply_result(:'queue', :'id'::bigint, :'token'::uuid, :'outcome', NULLIF(:'err', ''));
SQL
)
    [ "$applied" = t ] || echo "worker.sh: lease of event $id was lost before its result was recorded" >&2
  done <<<"$batch"
done
