-- Issue 18 item 9: grants are an operator's. Per owner scope, the queues an operator allows
-- that scope's agents to grant when they create a webhook over the API (store/allowances.rs);
-- a scope without a row may create none. `queues` is a JSON array of queue names.
CREATE TABLE grant_allowances (
    owner_scope TEXT PRIMARY KEY,
    queues      TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- A database written before allowances keeps working: each scope that has webhooks is allowed
-- the union of their grants, sorted. Webhooks themselves are not touched.
INSERT INTO grant_allowances (owner_scope, queues, updated_at)
SELECT owner_scope, json_agg(queue ORDER BY queue COLLATE "C")::text,
       (EXTRACT(EPOCH FROM now()) * 1000)::BIGINT
FROM (SELECT DISTINCT w.owner_scope, q.queue
      FROM webhooks w CROSS JOIN LATERAL json_array_elements_text(w.grant_queues::json) AS q(queue)) s
GROUP BY owner_scope;
