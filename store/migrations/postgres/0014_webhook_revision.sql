-- Issue 22: ingest keeps the webhook rows it reads in memory instead of reading one per
-- delivery. A row's `revision` moves on with every change to it, whoever makes it (this
-- version, an older replica in a rolling upgrade, an operator's SQL): an event is stored only
-- while its webhook is at the revision it was verified and routed under, and a replica whose
-- copy is stale reads the row again.
ALTER TABLE webhooks ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;

CREATE FUNCTION webhooks_next_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.revision := OLD.revision + 1;
    RETURN NEW;
END
$$;

CREATE TRIGGER webhooks_revision BEFORE UPDATE ON webhooks FOR EACH ROW
EXECUTE FUNCTION webhooks_next_revision();
