-- Issue 21: todo leases. A claim lasts until claim_expires_at; past it the todo is back in its
-- queue (another endpoint may claim it; the lapsed holder may still complete it until then).
ALTER TABLE todos ADD COLUMN claim_expires_at BIGINT;

-- Claims made before leases had no end, so a crashed agent's todos were stranded. They get
-- the default lease (30 minutes) from when they were claimed: older ones are back in their
-- queue at once.
UPDATE todos SET claim_expires_at = COALESCE(claimed_at, created_at) + 1800000
WHERE claimed_by IS NOT NULL;

-- A webhook's own claim lease in seconds; NULL: the instance's --claim-ttl-secs.
ALTER TABLE webhooks ADD COLUMN claim_ttl_secs BIGINT;

-- Releasing a claim became a verb (`release_todo`, family todos): an endpoint that could claim
-- may release what it claimed. Nothing is taken away.
UPDATE endpoints SET verbs = json_insert(verbs, '$[#]', 'release_todo')
WHERE EXISTS (SELECT 1 FROM json_each(endpoints.verbs) WHERE value = 'claim_todo')
  AND NOT EXISTS (SELECT 1 FROM json_each(endpoints.verbs) WHERE value = 'release_todo');
