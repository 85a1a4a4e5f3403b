-- Back to 00007: producers take their partition locks again (the functions below, then the
-- heads triggers are made again, 00008_down_after.sql); wake notes go.
DROP FUNCTION outbox._apply_wakes(outbox.queues);
DROP TABLE outbox.partition_wakes;
DROP FUNCTION outbox._note_written(oid, text[], bigint[], bigint[]);
COMMENT ON COLUMN outbox.partition_heads.floor_id IS
  'Every row of the partition with a smaller id is sent or poisoned: searches for the head start here, '
  'so poisoned rows are skipped once, not on every claim. Raised only while no producer of the '
  'partition is in flight (its advisory lock, see tg_queue__heads); a producer whose rows fall below it lowers it.';
