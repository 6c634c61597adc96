-- Issue 15: a forgery cannot take a delivery's once-key. The key is (webhook_id, delivery_id,
-- verified): a verified delivery whose id only unverified ones hold gets its own todo, and
-- deliveries of one kind still dedupe among themselves. Existing todos take their event's
-- verified flag.
ALTER TABLE todos ADD COLUMN verified INTEGER NOT NULL DEFAULT 1;
UPDATE todos SET verified = e.verified FROM events e WHERE e.id = todos.event_id;
ALTER TABLE todos DROP CONSTRAINT todos_webhook_id_delivery_id_key;
ALTER TABLE todos ADD CONSTRAINT todos_once_key UNIQUE (webhook_id, delivery_id, verified);

-- A webhook's deferred and unrouted backlog, counted when a delivery is over its rate.
CREATE INDEX events_unrouted_by_webhook ON events (webhook_id) WHERE routed = 0;
