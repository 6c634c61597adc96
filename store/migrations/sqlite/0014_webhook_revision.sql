-- Issue 22: ingest keeps the webhook rows it reads in memory instead of reading one per
-- delivery. A row's `revision` moves on with every change to it, whoever makes it (this
-- version, an older replica in a rolling upgrade, an operator's SQL): an event is stored only
-- while its webhook is at the revision it was verified and routed under, and a replica whose
-- copy is stale reads the row again.
ALTER TABLE webhooks ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;

CREATE TRIGGER webhooks_revision AFTER UPDATE ON webhooks FOR EACH ROW
WHEN NEW.revision = OLD.revision
BEGIN
    UPDATE webhooks SET revision = OLD.revision + 1 WHERE id = NEW.id;
END;
