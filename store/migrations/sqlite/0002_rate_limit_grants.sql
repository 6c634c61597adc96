-- Ingest takes its per-webhook rate-limit hits in blocks (store/rate_limits.rs): the size of
-- the last block granted, read back by the statement that grants it.
ALTER TABLE rate_limits ADD COLUMN last_grant BIGINT NOT NULL DEFAULT 0;
