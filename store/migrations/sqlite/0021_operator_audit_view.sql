-- Issue 47: the operator audit becomes a view of the change log. `operator_id` names the
-- operator credential of an entry that records an operator's act (an operator actor and an
-- audit `action`), NULL for every other entry; it is an index over the entry, not part of it:
-- the entry's text and hash are untouched, so the chain verifies as before. Filled here once
-- for the entries already written (each operator act since 0019 was written to the log with
-- its audit row); from now on an act is written to the log alone, and `operator_audit` keeps
-- the rows written before.
ALTER TABLE change_log ADD COLUMN operator_id TEXT;

UPDATE change_log SET operator_id = json_extract(entry, '$.actor.operator')
WHERE json_extract(entry, '$.actor.operator') IS NOT NULL
  AND json_extract(entry, '$.detail.action') IS NOT NULL;

CREATE INDEX change_log_operator_acts ON change_log (seq) WHERE operator_id IS NOT NULL;
