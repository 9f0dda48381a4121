-- Migrates an embedded ledger from schema version 1 to 2, in the same
-- transaction as `SqliteLedger::open`: excused (auth_error) attempts per
-- run, the Retry-After hold per arm, and the rounds closed of a
-- repeated-run cohort. Existing rows get 0 and NULL: nothing was excused,
-- held or closed by round before.
ALTER TABLE runs ADD COLUMN excused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE arms ADD COLUMN held_until_ms INTEGER;
ALTER TABLE cohort ADD COLUMN rounds_closed INTEGER NOT NULL DEFAULT 0;
PRAGMA user_version = 2;
