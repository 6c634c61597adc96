-- Issue 50: retention's count bound reads how many events each webhook holds from this table
-- instead of counting the whole events table on every pass. A table of its own, not a column
-- of `webhooks`: a change to a webhook row moves its `revision` on (0014), and a stored
-- delivery must not.
CREATE TABLE webhook_event_counts (
    webhook_id TEXT PRIMARY KEY,
    events BIGINT NOT NULL
);

INSERT INTO webhook_event_counts (webhook_id, events)
SELECT webhook_id, COUNT(*) FROM events GROUP BY webhook_id;

-- What stored and deleted events changed, appended once per statement and folded into the
-- counts by the retention pass (`Store::fold_event_counts`). Appending takes no lock another
-- writer waits on: concurrent ingest batches never queue, or deadlock, on a webhook's count.
CREATE TABLE event_count_deltas (
    webhook_id TEXT NOT NULL,
    delta BIGINT NOT NULL
);

CREATE FUNCTION count_events_in() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_count_deltas (webhook_id, delta)
    SELECT webhook_id, COUNT(*) FROM counted_in GROUP BY webhook_id;
    RETURN NULL;
END
$$;

CREATE FUNCTION count_events_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_count_deltas (webhook_id, delta)
    SELECT webhook_id, -COUNT(*) FROM counted_out GROUP BY webhook_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_counted_in AFTER INSERT ON events
REFERENCING NEW TABLE AS counted_in FOR EACH STATEMENT EXECUTE FUNCTION count_events_in();

CREATE TRIGGER events_counted_out AFTER DELETE ON events
REFERENCING OLD TABLE AS counted_out FOR EACH STATEMENT EXECUTE FUNCTION count_events_out();

CREATE FUNCTION uncount_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM webhook_event_counts WHERE webhook_id = OLD.id;
    RETURN NULL;
END
$$;

-- A deleted webhook's count goes with it (its deltas are dropped when folded).
CREATE TRIGGER webhooks_uncounted AFTER DELETE ON webhooks
FOR EACH ROW EXECUTE FUNCTION uncount_webhook();
