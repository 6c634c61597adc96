-- Issue 20: people sign in to the console. An operator issues a one-time sign-in link for a
-- human; following it opens a session. Only SHA-256 hashes of both tokens are stored, like
-- endpoint credentials and plan tokens; a session's CSRF token is derived from its token,
-- never stored.
CREATE TABLE sign_in_links (
    token_hash  TEXT PRIMARY KEY,
    human_login TEXT NOT NULL REFERENCES humans (login) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    used_at     BIGINT
);

CREATE TABLE console_sessions (
    token_hash  TEXT PRIMARY KEY,
    human_login TEXT NOT NULL REFERENCES humans (login) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
