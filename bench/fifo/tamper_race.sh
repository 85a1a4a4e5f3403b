#!/bin/bash
# Deterministic: the tampering (UPDATE ... SET sent_at; DELETE FROM outbox.partition_heads) done
# while ONE producer of a key is inside its COMMIT (after pgdrain's commit step, before it is
# visible). Queue public.tq, key 'x'. Prints what repair (dry run) and a claim then see.
set -u
U="$DATABASE_URL"
q() { psql "$U" -X -At -v ON_ERROR_STOP=1 -c "$1"; }
q "DO \$\$ BEGIN IF EXISTS (SELECT 1 FROM outbox.queues WHERE queue = 'public.tq') THEN PERFORM outbox.drop_queue('public.tq', true); END IF; END \$\$;
   DROP TABLE IF EXISTS public.tq, public.hold_commit CASCADE;
   CREATE TABLE public.tq (id bigserial PRIMARY KEY, event_type text NOT NULL, payload jsonb NOT NULL,
     created_at timestamptz NOT NULL DEFAULT now(), attempt_count int NOT NULL DEFAULT 0, next_attempt_at timestamptz,
     sent_at timestamptz, leased_until timestamptz, lease_token uuid, last_error text, k text NOT NULL);
   SELECT outbox.create_queue('public.tq', 'k');
   CREATE TABLE public.hold_commit (x int);
   CREATE OR REPLACE FUNCTION public.hold_commit_tg() RETURNS trigger LANGUAGE plpgsql AS \$\$
     BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END \$\$;
   CREATE CONSTRAINT TRIGGER hold AFTER INSERT ON public.hold_commit DEFERRABLE INITIALLY DEFERRED
     FOR EACH ROW EXECUTE FUNCTION public.hold_commit_tg();" >/dev/null
# Row A of key x, committed: the key has a head pointing at A.
q "INSERT INTO public.tq (event_type, payload, k) VALUES ('A', '{}', 'x')" >/dev/null
# The gate: an advisory lock held by a session that waits for a file.
rm -f /tmp/pgq/gate
( psql "$U" -X -At -c "SELECT pg_advisory_lock(4242); SELECT 'gate held'" -c "\! while [ ! -e /tmp/pgq/gate ]; do sleep 0.1; done" -c "SELECT pg_advisory_unlock(4242)" > /tmp/pgq/gate.out 2>&1 & )
sleep 0.5
# Producer of row B of key x: its commit step holds the head FOR KEY SHARE, then waits at the gate.
( psql "$U" -X -At -c "BEGIN" -c "INSERT INTO public.tq (event_type, payload, k) VALUES ('B', '{}', 'x')" \
    -c "INSERT INTO public.hold_commit VALUES (1)" -c "COMMIT" > /tmp/pgq/prodB.out 2>&1 & )
sleep 0.5
# The tampering, "while nothing runs" (but B is committing): every row marked sent, heads deleted.
( psql "$U" -X -At -c "UPDATE public.tq SET sent_at = now()" \
    -c "DELETE FROM outbox.partition_heads WHERE queue_id = (SELECT queue_id FROM outbox.queues WHERE queue = 'public.tq')" > /tmp/pgq/tamper_race.out 2>&1 & )
sleep 0.5
echo "waiting sessions:"; q "SELECT left(query, 60), wait_event_type, wait_event FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()"
touch /tmp/pgq/gate; sleep 1
echo "tamper session:"; cat /tmp/pgq/tamper_race.out
echo "rows:"; q "SELECT id, event_type, sent_at IS NOT NULL AS sent FROM public.tq ORDER BY id"
echo "heads / wake notes:"; q "SELECT 'head', partition_key, head_id, floor_id FROM outbox.partition_heads WHERE queue_id = (SELECT queue_id FROM outbox.queues WHERE queue = 'public.tq')
  UNION ALL SELECT 'wake', partition_key, low_id, NULL FROM outbox.partition_wakes WHERE queue_id = (SELECT queue_id FROM outbox.queues WHERE queue = 'public.tq')"
echo "repair (dry run):"; q "SELECT * FROM outbox.repair('public.tq', true)"
# A later producer of key x, then a claim.
q "INSERT INTO public.tq (event_type, payload, k) VALUES ('C', '{}', 'x')" >/dev/null
echo "repair (dry run) after producer C:"; q "SELECT * FROM outbox.repair('public.tq', true)"
echo "claim:"; q "SELECT id, event_type FROM outbox.claim_batch('public.tq', 10)"
