-- Issue 16: retention purges events past an age across every webhook, oldest first.
CREATE INDEX events_by_age ON events (received_at, id);
