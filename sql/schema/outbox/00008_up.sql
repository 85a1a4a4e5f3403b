-- Producers take no lock when they write (issue 14): the partition locks they held shared from
-- INSERT to COMMIT (up to 1,024 per queue, and a lock-mode batch holding one made INSERTs wait) are
-- gone. A committing producer holds its keys' heads FOR KEY SHARE instead, and leaves a wake note
-- here for a head a claim holds, which the next claim applies (outbox._apply_wakes).
CREATE UNLOGGED TABLE outbox.partition_wakes (
  queue_id integer NOT NULL,
  partition_key text NOT NULL,
  low_id bigint NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
CREATE INDEX partition_wakes_queue ON outbox.partition_wakes (queue_id);
COMMENT ON TABLE outbox.partition_wakes IS
  'Committed rows whose partition head a claim held while their producer committed; applied by the next claim (internal).';
COMMENT ON COLUMN outbox.partition_heads.floor_id IS
  'Every row of the partition with a smaller id is sent or poisoned: searches for the head start here, '
  'so poisoned rows are skipped once, not on every claim. Raised only with the head locked FOR UPDATE '
  '(a committing producer holds it FOR KEY SHARE); a producer whose rows fall below it lowers it.';
DROP FUNCTION outbox._note_written(integer, oid, text[], bigint[], bigint[]);
