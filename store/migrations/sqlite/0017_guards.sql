-- Issue 46: guards. After a confirm, the configuration it replaced runs in the shadow beside
-- the new one on live deliveries: a guard is a trial the other way round (its candidate is the
-- replaced configuration, its base the confirmed one), so the live runner counts it as it
-- counts trials. `kind` tells them apart ('trial' or 'guard'); `guard` keeps what a guard
-- alone has, as JSON: the versions (confirmed and replaced), what a breach does (`revert` or
-- `alert`), its thresholds, and once it breached, the breach and the version a revert saved.
ALTER TABLE trials ADD COLUMN kind TEXT NOT NULL DEFAULT 'trial';
ALTER TABLE trials ADD COLUMN guard TEXT;
