-- Migrates an embedded ledger from schema version 1 to 2, in the same
-- transaction as `SqliteLedger::open`: excused (auth_error) attempts per
-- run, the Retry-After hold per arm, and the rounds closed of a
-- repeated-run cohort. Existing rows get 0 and NULL: nothing was excused,
-- held or closed by round before. Then the counts status reads (see
-- `sqlite_schema.sql`, where they are described), filled from the rows
-- they count.
ALTER TABLE runs ADD COLUMN excused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE arms ADD COLUMN held_until_ms INTEGER;
ALTER TABLE cohort ADD COLUMN rounds_closed INTEGER NOT NULL DEFAULT 0;
CREATE TABLE run_counts (
    arm_id  TEXT    NOT NULL REFERENCES arms (id),
    state   TEXT    NOT NULL,
    outcome TEXT    NOT NULL DEFAULT '',
    n       INTEGER NOT NULL,
    PRIMARY KEY (arm_id, state, outcome)
) WITHOUT ROWID;
INSERT INTO run_counts (arm_id, state, outcome, n)
    SELECT arm_id, state, COALESCE(outcome, ''), COUNT(*) FROM runs GROUP BY arm_id, state, COALESCE(outcome, '');

CREATE TABLE attempt_counts (
    class TEXT    PRIMARY KEY,
    n     INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO attempt_counts (class, n) SELECT class, COUNT(*) FROM attempts GROUP BY class;

CREATE TABLE discarded_count (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
);
INSERT INTO discarded_count (id, n) SELECT 1, COUNT(*) FROM discarded;

PRAGMA user_version = 2;
