-- SERIALIZABLE producers note their rows in their hook (issue 14). Their commit step read their
-- notes and hook by index, and the page it read is the page the next producer's note and hook go
-- into: a predicate lock there is a read/write dependency on every producer that writes after it,
-- and three overlapping SERIALIZABLE producers of unrelated keys made a chain PostgreSQL cancels
-- (40001, "identification as a pivot": about 1 in 1,000 transactions at 4 clients). A
-- SERIALIZABLE transaction now keeps its keys and ids in its own row of outbox.commit_hooks,
-- which its commit step finds by the primary key's arbiter (no predicate lock) and deletes by ctid.
ALTER TABLE outbox.commit_hooks
  ADD COLUMN table_oids oid[],
  ADD COLUMN keys text[],
  ADD COLUMN ids bigint[];
COMMENT ON COLUMN outbox.commit_hooks.keys IS
  'SERIALIZABLE transactions only: the key and id of every row written, and its table (aligned); others note in outbox.commit_notes.';
