-- Issue 21 item 6: redrive. An owner re-routes a webhook's quarantined, faulted or pending
-- events under its current configuration, planned and confirmed like a pack install. A
-- redrive is stored from its plan on: the token only as its SHA-256 hex, bound to the webhook,
-- its owner scope and the configuration version it was planned against; single use; expiring.
-- `plan` holds, per event, the decision the plan saw and the one it would record, so the old
-- decision stays visible after the confirm replaced it on the event; `result` says what the
-- confirm did with each (applied, or skipped because something routed it meanwhile).
CREATE TABLE redrives (
    id                  TEXT PRIMARY KEY,
    token_hash          TEXT NOT NULL UNIQUE,
    webhook_id          TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    owner_scope         TEXT NOT NULL,
    base_config_version BIGINT NOT NULL,
    base_config_digest  TEXT NOT NULL,
    plan                TEXT NOT NULL,
    created_at          BIGINT NOT NULL,
    expires_at          BIGINT NOT NULL,
    used_at             BIGINT,
    result              TEXT
);

CREATE INDEX redrives_by_webhook ON redrives (webhook_id);

-- The redrive whose confirm recorded an event's current decision (NULL: ingest routed it). A
-- confirm re-routes an event only while this is still what its plan saw, so of two redrives
-- planned over the same event only the first confirmed routes it.
ALTER TABLE events ADD COLUMN redrive_id TEXT;

-- Redriving became two verbs (family webhook-rules): an endpoint that could change a webhook's
-- rules may re-route what the old rules quarantined. Nothing is taken away.
UPDATE endpoints SET verbs = (verbs::jsonb || '["redrive_webhook_events"]'::jsonb)::text
WHERE jsonb_exists(verbs::jsonb, 'set_webhook_rules')
  AND NOT jsonb_exists(verbs::jsonb, 'redrive_webhook_events');
UPDATE endpoints SET verbs = (verbs::jsonb || '["confirm_webhook_redrive"]'::jsonb)::text
WHERE jsonb_exists(verbs::jsonb, 'set_webhook_rules')
  AND NOT jsonb_exists(verbs::jsonb, 'confirm_webhook_redrive');
