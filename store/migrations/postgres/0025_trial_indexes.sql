-- Issue 50: what reads trials (and guards, the same table) reaches them by an index that
-- holds only what it asks for, however many a webhook has had: every confirm leaves a guard,
-- so a busy webhook's history of them grows until retention takes the ended ones.
--
-- The running ones: ingest's refresh of a webhook's trials, the overdue pass over every
-- webhook's, a start's count of the running, explain's read of those running at a delivery.
CREATE INDEX trials_running ON trials (webhook_id, started_at) WHERE ended_at IS NULL;
-- Explain's read of those that ended after a delivery arrived (so were running when it did).
CREATE INDEX trials_ended ON trials (webhook_id, ended_at) WHERE ended_at IS NOT NULL;
-- Retention's pass over the ended ones, oldest end first.
CREATE INDEX trials_by_end ON trials (ended_at, id) WHERE ended_at IS NOT NULL;
