-- Module outbox as of release 0.1.0, after its functions: the deferred trigger that runs a
-- producer's commit step (outbox.tg_queue__commit) once per transaction, on its row of
-- outbox.commit_hooks.
CREATE CONSTRAINT TRIGGER pgdrain_commit AFTER INSERT ON outbox.commit_hooks
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox.tg_queue__commit();
