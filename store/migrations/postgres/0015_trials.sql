-- Issue 45: trials. A plan's candidate runs beside a webhook's live rules on its live
-- deliveries, routing nothing, until stopped, `max_deliveries` or `max_duration`, or until the
-- saved configuration is no longer the one it started beside (`stale`). What it observed is
-- kept pre-aggregated, so its report reads counts, never deliveries: how many deliveries it
-- saw and evaluated (the rest were shed under load), and per transition (the live decision's
-- label, the candidate's) how many and up to 20 example event ids. `forecast` is the plan's
-- replay reduced to the same counts: `{deliveries, transitions: [{from, to, count}]}`.
CREATE TABLE trials (
    id                 TEXT PRIMARY KEY,
    webhook_id         TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    owner_scope        TEXT NOT NULL,
    plan_id            TEXT NOT NULL,
    candidate          TEXT NOT NULL,
    candidate_digest   TEXT NOT NULL,
    base_config_digest TEXT NOT NULL,
    forecast           TEXT NOT NULL,
    max_deliveries     BIGINT,
    max_duration_ms    BIGINT NOT NULL,
    started_at         BIGINT NOT NULL,
    started_by         TEXT NOT NULL,
    ended_at           BIGINT,
    end_reason         TEXT,
    seen               BIGINT NOT NULL DEFAULT 0,
    evaluated          BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX trials_by_webhook ON trials (webhook_id, started_at);

CREATE TABLE trial_transitions (
    trial_id   TEXT NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    from_label TEXT NOT NULL,
    to_label   TEXT NOT NULL,
    count      BIGINT NOT NULL,
    examples   TEXT NOT NULL,
    PRIMARY KEY (trial_id, from_label, to_label)
);
