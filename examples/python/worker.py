#!/usr/bin/env python3
"""A pgdrain worker in Python with psycopg2 (Debian: apt-get install python3-psycopg2).

It leases a batch with outbox.claim_batch, POSTs each event to a webhook, and records all the
outcomes of the batch in one round trip with outbox.apply_results. Order per key, fencing,
backoff and poison are decided by the SQL functions; this loop only moves data.

    DATABASE_URL=postgres://... QUEUE=public.events WEBHOOK_URL=http://127.0.0.1:8080/hook \\
        python3 examples/python/worker.py

The webhook gets the payload as the JSON body and the event in headers (X-Event-Id,
X-Event-Type, X-Partition-Key, X-Attempt). A 2xx answer = sent; 408, 429, 5xx or a network
error = transient (retried with backoff); any other status = permanent (the event is poisoned).
Without WEBHOOK_URL the worker prints each event and counts it as sent.

Settings (environment): QUEUE (required), WEBHOOK_URL, BATCH (10), LEASE_SECONDS (30; must cover
a whole batch of deliveries), TIMEOUT_SECONDS (5, per request), IDLE_SLEEP (1 second),
DRAIN_UNTIL_EMPTY=1 to exit once the queue has nothing pending (poisoned rows do not count).
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

import psycopg2

SENT, TRANSIENT, PERMANENT = "sent", "transient", "permanent"


def deliver(url, timeout, event):
    """Returns (outcome, error text or None) for one event."""
    event_id, event_type, payload, key, attempt = event
    if not url:
        print(f"event {event_id} ({event_type}, key {key}, attempt {attempt}): {json.dumps(payload)}")
        return SENT, None
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-Event-Id": str(event_id),
            "X-Event-Type": event_type,
            "X-Partition-Key": key or "",
            "X-Attempt": str(attempt),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return SENT, None
    except urllib.error.HTTPError as e:
        error = f"HTTP {e.code}: {e.read(200).decode(errors='replace').strip()}"
        if e.code in (408, 429) or e.code >= 500:
            return TRANSIENT, error
        return PERMANENT, error
    except (urllib.error.URLError, OSError) as e:
        return TRANSIENT, f"request failed: {e}"


def main():
    queue = os.environ["QUEUE"]
    url = os.environ.get("WEBHOOK_URL", "")
    batch = int(os.environ.get("BATCH", "10"))
    lease = float(os.environ.get("LEASE_SECONDS", "30"))
    timeout = float(os.environ.get("TIMEOUT_SECONDS", "5"))
    idle_sleep = float(os.environ.get("IDLE_SLEEP", "1"))
    until_empty = os.environ.get("DRAIN_UNTIL_EMPTY") == "1"

    conn = psycopg2.connect(os.environ["DATABASE_URL"], application_name="pgdrain-python-example")
    # Every call is its own short transaction: the lease, not an open transaction, holds the row.
    conn.autocommit = True
    cur = conn.cursor()
    while True:
        cur.execute(
            "SELECT id, lease_token::text, event_type, payload, partition_key, attempt_count"
            " FROM outbox.claim_batch(%s, %s, make_interval(secs => %s))",
            (queue, batch, lease),
        )
        rows = cur.fetchall()
        if not rows:
            if until_empty:
                cur.execute("SELECT pending FROM outbox.stats(%s)", (queue,))
                if cur.fetchone()[0] == 0:
                    return 0
            time.sleep(idle_sleep)
            continue

        ids, tokens, outcomes, errors = [], [], [], []
        for event_id, token, event_type, payload, key, attempt in rows:
            outcome, error = deliver(url, timeout, (event_id, event_type, payload, key, attempt))
            ids.append(event_id)
            tokens.append(token)
            outcomes.append(outcome)
            errors.append(error)
        cur.execute(
            "SELECT id, applied FROM outbox.apply_results(%s, %s::bigint[], %s::uuid[], %s::text[], %s::text[])",
            (queue, ids, tokens, outcomes, errors),
        )
        for event_id, applied in cur.fetchall():
            if not applied:
                # Our lease expired and another worker holds the row now: nothing was written, and
                # the new holder delivers it. Leases are time; the token is ownership.
                print(f"worker.py: lease of event {event_id} was lost before its result was recorded",
                      file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
