-- Issue 20: a person accepts. Per webhook, who may put a plan live: `self` (the endpoint that
-- planned, as before) or `person` (an endpoint's confirm waits for a person's acceptance).
ALTER TABLE webhooks ADD COLUMN confirm_policy TEXT NOT NULL DEFAULT 'self';

-- A plan awaiting a person: who proposed it, since when, until when; and a person's decision.
-- Old rows have none of these and read as they did (planned, or applied once used).
ALTER TABLE plans ADD COLUMN proposed_by_endpoint TEXT;
ALTER TABLE plans ADD COLUMN proposed_by_human TEXT;
ALTER TABLE plans ADD COLUMN pending_at BIGINT;
ALTER TABLE plans ADD COLUMN approval_expires_at BIGINT;
ALTER TABLE plans ADD COLUMN decided_by TEXT;
ALTER TABLE plans ADD COLUMN rejected_at BIGINT;
ALTER TABLE plans ADD COLUMN reject_reason TEXT;
CREATE INDEX plans_pending ON plans (owner_scope, pending_at);

-- Confirming became a verb of its own (`confirm_rule_pack_plan`), and a plan's state can be
-- read (`get_rule_pack_plan`): an endpoint that could install or remove packs keeps the right
-- to confirm, and one that could list them may read a plan's state. Nothing is taken away.
UPDATE endpoints SET verbs = json_insert(verbs, '$[#]', 'confirm_rule_pack_plan')
WHERE EXISTS (SELECT 1 FROM json_each(endpoints.verbs)
              WHERE value IN ('install_rule_pack', 'remove_rule_pack'))
  AND NOT EXISTS (SELECT 1 FROM json_each(endpoints.verbs) WHERE value = 'confirm_rule_pack_plan');
UPDATE endpoints SET verbs = json_insert(verbs, '$[#]', 'get_rule_pack_plan')
WHERE EXISTS (SELECT 1 FROM json_each(endpoints.verbs)
              WHERE value IN ('list_rule_packs', 'install_rule_pack', 'remove_rule_pack'))
  AND NOT EXISTS (SELECT 1 FROM json_each(endpoints.verbs) WHERE value = 'get_rule_pack_plan');
