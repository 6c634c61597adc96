-- Issue 48: a person dismisses a plan that can no longer be accepted (stale: the webhook's
-- rules moved since it was made) from the console's inbox. The plan is kept as it was, with
-- who dismissed it and when; the inbox lists it no more.
ALTER TABLE plans ADD COLUMN dismissed_at BIGINT;
ALTER TABLE plans ADD COLUMN dismissed_by TEXT;
