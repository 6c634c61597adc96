-- Issue 50: retention's count bound reads how many events each webhook holds from this table,
-- kept by triggers as events are stored and deleted, instead of counting the whole events
-- table on every pass. A table of its own, not a column of `webhooks`: a change to a webhook
-- row moves its `revision` on (0014), and a stored delivery must not.
CREATE TABLE webhook_event_counts (
    webhook_id TEXT PRIMARY KEY,
    events BIGINT NOT NULL
);

INSERT INTO webhook_event_counts (webhook_id, events)
SELECT webhook_id, COUNT(*) FROM events GROUP BY webhook_id;

CREATE TRIGGER events_counted_in AFTER INSERT ON events FOR EACH ROW
BEGIN
    INSERT INTO webhook_event_counts (webhook_id, events) VALUES (NEW.webhook_id, 1)
    ON CONFLICT (webhook_id) DO UPDATE SET events = events + 1;
END;

CREATE TRIGGER events_counted_out AFTER DELETE ON events FOR EACH ROW
BEGIN
    UPDATE webhook_event_counts SET events = events - 1 WHERE webhook_id = OLD.webhook_id;
END;

-- A deleted webhook's count goes with it.
CREATE TRIGGER webhooks_uncounted AFTER DELETE ON webhooks FOR EACH ROW
BEGIN
    DELETE FROM webhook_event_counts WHERE webhook_id = OLD.id;
END;
