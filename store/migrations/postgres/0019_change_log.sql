-- Issue 47: one tamper-evident log of every change to routing. Each row is one entry of a hash
-- chain (switchboard_model::change_log): `entry` is its canonical JSON (which names its seq
-- and the previous entry's hash), `hash` that text's SHA-256. Rows are appended in the same
-- transaction as the change they record, and nothing updates or deletes them: no foreign
-- key, so deleting a webhook or purging its events leaves its entries.
CREATE TABLE change_log (
    seq         BIGINT PRIMARY KEY,
    at          BIGINT NOT NULL,
    owner_scope TEXT,
    webhook_id  TEXT,
    entry       TEXT NOT NULL,
    hash        TEXT NOT NULL
);

CREATE INDEX change_log_by_webhook ON change_log (webhook_id, seq);
