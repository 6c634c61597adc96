-- Switchboard control plane, SQLite. Portable types only, so the Any driver decodes the same
-- values on both backends: BIGINT millisecond timestamps, JSON as TEXT, ids as TEXT, flags as
-- INTEGER 0/1, raw bodies as BLOB. The PostgreSQL tree mirrors this file column for column.

CREATE TABLE humans (
    login        TEXT PRIMARY KEY,
    display_name TEXT,
    created_at   BIGINT NOT NULL
);

CREATE TABLE teams (
    slug       TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE memberships (
    team_slug   TEXT NOT NULL REFERENCES teams (slug) ON DELETE CASCADE,
    human_login TEXT NOT NULL REFERENCES humans (login) ON DELETE CASCADE,
    role        TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (team_slug, human_login)
);

CREATE INDEX memberships_by_human ON memberships (human_login);

-- The credential itself is never stored: only its SHA-256 hex.
CREATE TABLE endpoints (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    human_login     TEXT NOT NULL REFERENCES humans (login),
    owner_scope     TEXT NOT NULL,
    verbs           TEXT NOT NULL,
    credential_hash TEXT NOT NULL UNIQUE,
    created_at      BIGINT NOT NULL,
    revoked_at      BIGINT
);

CREATE INDEX endpoints_by_scope ON endpoints (owner_scope, created_at);

-- The signing secret is kept in the clear: verifying an HMAC needs it.
CREATE TABLE webhooks (
    id                TEXT PRIMARY KEY,
    owner_scope       TEXT NOT NULL,
    source_type       TEXT NOT NULL CHECK (source_type IN ('forgejo', 'gitea', 'github', 'cairn', 'generic')),
    secret            TEXT NOT NULL,
    grant_queues      TEXT NOT NULL,
    reject_unverified INTEGER NOT NULL DEFAULT 0,
    configuration     TEXT NOT NULL,
    config_version    BIGINT NOT NULL,
    config_digest     TEXT NOT NULL,
    provenance        TEXT NOT NULL,
    trusted_actors    TEXT,
    created_at        BIGINT NOT NULL
);

CREATE INDEX webhooks_by_scope ON webhooks (owner_scope, created_at);

-- owner_scope is copied from the webhook (which never changes scope), so every scoped read is
-- one indexed lookup that costs the same whether the id is unknown or someone else's.
CREATE TABLE events (
    id          TEXT PRIMARY KEY,
    webhook_id  TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    owner_scope TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    source      TEXT NOT NULL,
    kind        TEXT NOT NULL,
    headers     TEXT NOT NULL,
    body        BLOB NOT NULL,
    verified    INTEGER NOT NULL,
    received_at BIGINT NOT NULL,
    decision    TEXT,
    fault       TEXT,
    routed      INTEGER NOT NULL DEFAULT 0,
    routed_at   BIGINT
);

-- Paging and replay: the newest events of one webhook.
CREATE INDEX events_by_webhook ON events (webhook_id, received_at DESC, id DESC);
-- Events stored while no router answered, found again to route them later.
CREATE INDEX events_unrouted ON events (received_at, id) WHERE routed = 0;

-- UNIQUE (webhook_id, delivery_id) is the once-key: a redelivery creates no second todo.
CREATE TABLE todos (
    id           TEXT PRIMARY KEY,
    owner_scope  TEXT NOT NULL,
    webhook_id   TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id     TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    delivery_id  TEXT NOT NULL,
    queue        TEXT NOT NULL,
    rule_id      TEXT,
    created_at   BIGINT NOT NULL,
    claimed_by   TEXT,
    claimed_at   BIGINT,
    completed_by TEXT,
    completed_at BIGINT,
    UNIQUE (webhook_id, delivery_id)
);

CREATE INDEX todos_by_queue ON todos (owner_scope, queue, created_at, id);
CREATE INDEX todos_by_event ON todos (event_id);

-- Changes are facts: one row per saved configuration version, never updated.
CREATE TABLE configuration_history (
    webhook_id     TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    version        BIGINT NOT NULL,
    owner_scope    TEXT NOT NULL,
    actor_endpoint TEXT,
    actor_human    TEXT,
    change         TEXT NOT NULL,
    provenance     TEXT,
    digest_before  TEXT,
    digest_after   TEXT NOT NULL,
    configuration  TEXT NOT NULL,
    saved_at       BIGINT NOT NULL,
    PRIMARY KEY (webhook_id, version)
);

-- A plan's token is stored only as its SHA-256 hex; used_at makes it single-use.
CREATE TABLE plans (
    id                  TEXT PRIMARY KEY,
    token_hash          TEXT NOT NULL UNIQUE,
    webhook_id          TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    owner_scope         TEXT NOT NULL,
    pack_name           TEXT NOT NULL,
    pack_version        TEXT NOT NULL,
    params_digest       TEXT NOT NULL,
    candidate           TEXT NOT NULL,
    candidate_digest    TEXT NOT NULL,
    base_config_version BIGINT NOT NULL,
    plan                TEXT NOT NULL,
    created_at          BIGINT NOT NULL,
    expires_at          BIGINT NOT NULL,
    used_at             BIGINT
);

CREATE INDEX plans_by_webhook ON plans (webhook_id);
CREATE INDEX plans_by_expiry ON plans (expires_at);

-- One replay per webhook across every control replica; expires_at frees a crashed holder's lease.
CREATE TABLE replay_leases (
    webhook_id TEXT PRIMARY KEY REFERENCES webhooks (id) ON DELETE CASCADE,
    holder     TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);

-- Fixed-window counters shared by every replica: (subject, kind) -> hits in the current window.
CREATE TABLE rate_limits (
    subject      TEXT NOT NULL,
    kind         TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    hits         BIGINT NOT NULL,
    PRIMARY KEY (subject, kind)
);
