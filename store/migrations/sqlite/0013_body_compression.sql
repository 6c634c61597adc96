-- Issue 22: PostgreSQL's 0013 compresses delivery bodies with lz4 instead of pglz. SQLite
-- stores bodies as they are; nothing changes here, and the versions stay in step.
SELECT 1;
