-- Issue 21 item 3: explain. Every recorded decision names the configuration version and digest
-- the router evaluated for it, so "why did this delivery go there?" can be answered later.
-- NULL: unknown (decisions recorded before this migration, and events not routed yet).
ALTER TABLE events ADD COLUMN config_version BIGINT;
ALTER TABLE events ADD COLUMN config_digest TEXT;

-- Explaining an event became a verb (`explain_webhook_event`, family webhooks, read-only): an
-- endpoint that could read an event may ask why it was decided. Nothing is taken away.
UPDATE endpoints SET verbs = (verbs::jsonb || '["explain_webhook_event"]'::jsonb)::text
WHERE jsonb_exists(verbs::jsonb, 'get_webhook_event')
  AND NOT jsonb_exists(verbs::jsonb, 'explain_webhook_event');
