-- Issue 46: the guard is part of the plan. `guard_on_breach` is what a guard does on a breach
-- when its plan does not say (`revert` or `alert`), set by an operator per webhook; NULL: revert.
-- `reverted_at` marks a plan whose guard reverted the change it applied (state `reverted`).
ALTER TABLE webhooks ADD COLUMN guard_on_breach TEXT;
ALTER TABLE plans ADD COLUMN reverted_at BIGINT;
