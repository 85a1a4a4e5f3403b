-- Undoes the 0.1.0 baseline of module outbox: the schema, its functions, and every queue's
-- triggers and registration with it (queue tables stay). The pgdrain_* roles stay: they are
-- cluster-wide, and other databases (and module alr) may still use them.
DROP SCHEMA outbox CASCADE;
