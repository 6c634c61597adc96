-- Issue 50: what reads trials (and guards, the same table) reaches them by an index that
-- holds only what it asks for, however many a webhook has had: every confirm leaves a guard,
-- so a busy webhook's history of them grows until retention takes the ended ones.
--
-- A webhook's trials or guards, newest first: a page of the listing, the newest guard.
CREATE INDEX trials_by_kind ON trials (webhook_id, kind, started_at, id);
-- The running ones: ingest's refresh of a webhook's trials, a start's count, the overdue
-- pass over every webhook's, and the first half of explain's read of those running when a
-- delivery arrived.
CREATE INDEX trials_running ON trials (webhook_id, kind, started_at) WHERE ended_at IS NULL;
-- The second half of explain's read: those that ended after the delivery arrived.
CREATE INDEX trials_ended ON trials (webhook_id, kind, ended_at) WHERE ended_at IS NOT NULL;
-- Retention's pass over the ended ones, oldest end first.
CREATE INDEX trials_by_end ON trials (ended_at, id) WHERE ended_at IS NOT NULL;
-- A plan's guard (a plan's page, its report).
CREATE INDEX trials_by_plan ON trials (plan_id, started_at);
