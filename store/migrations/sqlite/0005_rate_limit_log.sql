-- Issue 18: the replay limit ("10 per endpoint per minute") counts the starts within any
-- 60 s, not per fixed window: one row per start, pruned as they age out.
CREATE TABLE rate_limit_log (
    subject TEXT NOT NULL,
    kind    TEXT NOT NULL,
    at      BIGINT NOT NULL
);
CREATE INDEX rate_limit_log_by_subject ON rate_limit_log (subject, kind, at);
