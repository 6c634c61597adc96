-- Issue 21 item 1: operators act through control's `Operators` gRPC API with credentials of
-- their own kind (`sbo_…`), stored only as SHA-256 hashes like endpoint credentials; an
-- endpoint credential is never one of these, nor the other way round. `created_by` is the
-- operator credential that made it; NULL for one bootstrapped from the database.
CREATE TABLE operator_credentials (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    credential_hash TEXT NOT NULL UNIQUE,
    created_at      BIGINT NOT NULL,
    revoked_at      BIGINT,
    created_by      TEXT REFERENCES operator_credentials (id)
);

-- Every change an operator makes: who (the operator credential; NULL for a bootstrap from the
-- database), what (`action`, e.g. `create_team`), on what (`target`, e.g. `team:infra`), and
-- typed detail as a JSON object of strings. Never a secret.
CREATE TABLE operator_audit (
    id          TEXT PRIMARY KEY,
    at          BIGINT NOT NULL,
    operator_id TEXT REFERENCES operator_credentials (id),
    action      TEXT NOT NULL,
    target      TEXT NOT NULL,
    detail      TEXT NOT NULL
);
CREATE INDEX operator_audit_newest_first ON operator_audit (at DESC, id DESC);
