-- Issue 22: a delivery body (JSON, usually 2–30 KiB) is compressed when it is stored, and
-- PostgreSQL's default compression, pglz, was a fifth of its CPU per delivery at ingest
-- (perf, docs/benchmarks.md). lz4 compresses JSON nearly as well at a fraction of the CPU.
-- Bodies stored before keep pglz and read back as before; only new rows use lz4. A server
-- built without lz4 keeps pglz: this is a speed-up, never a reason for an upgrade to fail.
DO $$
BEGIN
    ALTER TABLE events ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'events.body keeps the default compression: %', SQLERRM;
END
$$;
