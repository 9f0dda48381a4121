-- Migrates an embedded ledger from schema version 1 to 2, in the same
-- transaction as `SqliteLedger::open`: excused (auth_error) attempts per
-- run and the Retry-After hold per arm. Existing rows get 0 and NULL:
-- nothing was excused or held before.
ALTER TABLE runs ADD COLUMN excused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE arms ADD COLUMN held_until_ms INTEGER;
PRAGMA user_version = 2;
