-- Issue 48: a webhook has a display name, set at create and editable by an editor, shown
-- beside its id wherever it is listed. Display only: not unique, never a key. NULL: no name
-- (every webhook created before this migration).
ALTER TABLE webhooks ADD COLUMN name TEXT;
