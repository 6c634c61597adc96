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
SELECT owner_scope, json_group_array(queue ORDER BY queue), CAST(strftime('%s', 'now') AS INTEGER) * 1000
FROM (SELECT DISTINCT w.owner_scope AS owner_scope, q.value AS queue
      FROM webhooks w, json_each(w.grant_queues) q)
GROUP BY owner_scope;
