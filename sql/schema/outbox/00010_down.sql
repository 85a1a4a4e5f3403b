-- Back to 00009. The role stays: it is cluster-wide and other databases may use it.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM pgdrain_reader;
REVOKE SELECT ON outbox.queues FROM pgdrain_reader;
REVOKE USAGE ON SCHEMA outbox FROM pgdrain_reader;
DROP FUNCTION outbox.poisoned_rows(text, integer, bigint);
DROP FUNCTION outbox.release_lease(text, bigint);
