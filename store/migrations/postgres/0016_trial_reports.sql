-- Issue 45: a trial reports in its plan's own terms. `plan` keeps the plan the trial started
-- from (its report, diffs and how to apply it, without the token), so the trial can be
-- promoted after the plan's token expired; NULL for trials started before this migration,
-- which report but cannot be promoted. `trial_rules` tallies, per candidate rule, the live
-- deliveries it decided first and those it faulted on. Decisions the candidate did not
-- change are kept in `trial_transitions` too, with from_label = to_label and no examples,
-- so the report's totals before and after are sums over one table.
ALTER TABLE trials ADD COLUMN plan TEXT;

CREATE TABLE trial_rules (
    trial_id      TEXT NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    rule_id       TEXT NOT NULL,
    first_matches BIGINT NOT NULL DEFAULT 0,
    faults        BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (trial_id, rule_id)
);
