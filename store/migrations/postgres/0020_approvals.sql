-- Issue 47: approvals that separate duties. `approval_rule` is the webhook's rule as JSON
-- (switchboard_model::approval::ApprovalRule), set by an operator; NULL: the default (one
-- person, two for a plan with a risk). `plan_approvals` holds each person's acceptance of a
-- pending plan, bound to the digest of the plan they read; one row per person and plan, so
-- accepting twice records once. Purged with the plan.
ALTER TABLE webhooks ADD COLUMN approval_rule TEXT;

CREATE TABLE plan_approvals (
    plan_id     TEXT NOT NULL,
    person      TEXT NOT NULL,
    plan_digest TEXT NOT NULL,
    approved_at BIGINT NOT NULL,
    PRIMARY KEY (plan_id, person)
);
