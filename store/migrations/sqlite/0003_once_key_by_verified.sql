-- Issue 15: a forgery cannot take a delivery's once-key. The key is (webhook_id, delivery_id,
-- verified): a verified delivery whose id only unverified ones hold gets its own todo, and
-- deliveries of one kind still dedupe among themselves. Existing todos take their event's
-- verified flag. SQLite cannot change a table's UNIQUE constraint in place: the table is
-- rebuilt, rows and indexes kept.
CREATE TABLE todos_v3 (
    id           TEXT PRIMARY KEY,
    owner_scope  TEXT NOT NULL,
    webhook_id   TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id     TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    delivery_id  TEXT NOT NULL,
    verified     INTEGER NOT NULL DEFAULT 1,
    queue        TEXT NOT NULL,
    rule_id      TEXT,
    created_at   BIGINT NOT NULL,
    claimed_by   TEXT,
    claimed_at   BIGINT,
    completed_by TEXT,
    completed_at BIGINT,
    UNIQUE (webhook_id, delivery_id, verified)
);

INSERT INTO todos_v3 (id, owner_scope, webhook_id, event_id, delivery_id, verified, queue, rule_id,
                      created_at, claimed_by, claimed_at, completed_by, completed_at)
SELECT t.id, t.owner_scope, t.webhook_id, t.event_id, t.delivery_id,
       COALESCE((SELECT e.verified FROM events e WHERE e.id = t.event_id), 1),
       t.queue, t.rule_id, t.created_at, t.claimed_by, t.claimed_at, t.completed_by, t.completed_at
FROM todos t;

DROP TABLE todos;
ALTER TABLE todos_v3 RENAME TO todos;
CREATE INDEX todos_by_queue ON todos (owner_scope, queue, created_at, id);
CREATE INDEX todos_by_event ON todos (event_id);

-- A webhook's deferred and unrouted backlog, counted when a delivery is over its rate.
CREATE INDEX events_unrouted_by_webhook ON events (webhook_id) WHERE routed = 0;
