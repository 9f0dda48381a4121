-- The embedded ledger's schema, version 2 (`PRAGMA user_version`).
-- Applied once, in one transaction, by `SqliteLedger::open` on an empty
-- file (a version 1 file is migrated by `sqlite_migrate_1_2.sql`).
-- Enumerations are stored as their snake_case names.

-- The cohort itself: exactly one row (id = 1), written by `seed`. Typed
-- columns rather than a key-value table, so that the mutable cohort state
-- (the token counter, the window, abort) is read and written as one row.
CREATE TABLE cohort (
    id               INTEGER PRIMARY KEY CHECK (id = 1),
    name             TEXT    NOT NULL,
    manifest_sha256  TEXT    NOT NULL,
    -- The PlanHeader as JSON: immutable once seeded.
    header           TEXT    NOT NULL,
    -- The last fencing token handed out (cohort-wide; the first is 1).
    last_token       INTEGER NOT NULL DEFAULT 0,
    -- The collection window: NULL until the first lease is granted.
    window_start_ms  INTEGER,
    window_end_ms    INTEGER,
    -- When the window was closed (its pending runs finalised); NULL before.
    window_closed_ms INTEGER,
    -- The operator's reason, once aborted.
    aborted          TEXT,
    -- A repeated-run cohort: rounds 1..=n whose own window has closed.
    rounds_closed    INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE questions (
    id   TEXT PRIMARY KEY,
    text TEXT NOT NULL
);

CREATE TABLE arms (
    id                TEXT    PRIMARY KEY,
    -- Index in the plan's arm list: status lists arms in this order.
    position          INTEGER NOT NULL UNIQUE,
    concurrency       INTEGER NOT NULL,
    pinned_version    TEXT    NOT NULL,
    paused_reason     TEXT,
    -- JSON array of labels, the pinned one first.
    accepted_versions TEXT    NOT NULL,
    -- No run of the arm is leased before this instant (a provider's
    -- Retry-After); NULL when never held.
    held_until_ms     INTEGER
);

-- One row per planned run; `position` is its index in the planned order.
CREATE TABLE runs (
    position         INTEGER PRIMARY KEY,
    run_id           TEXT    NOT NULL UNIQUE,
    question_id      TEXT    NOT NULL REFERENCES questions (id),
    arm_id           TEXT    NOT NULL REFERENCES arms (id),
    rep              INTEGER NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'leased', 'final')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    -- Of those, the excused ones (auth_error): not counted against the
    -- retry budget nor in the closing outcome.
    excused          INTEGER NOT NULL DEFAULT 0,
    -- A pending run is not leased before this instant (retry backoff).
    not_before_ms    INTEGER NOT NULL DEFAULT 0,
    -- The current (or last) lease: fencing token, holder, grant, expiry.
    token            INTEGER NOT NULL DEFAULT 0,
    worker           TEXT    NOT NULL DEFAULT '',
    leased_ms        INTEGER NOT NULL DEFAULT 0,
    expires_ms       INTEGER NOT NULL DEFAULT 0,
    started_ms       INTEGER NOT NULL DEFAULT 0,
    ended_ms         INTEGER NOT NULL DEFAULT 0,
    outcome          TEXT,
    reason           TEXT    NOT NULL DEFAULT '',
    record_sha256    TEXT    NOT NULL DEFAULT '',
    observed_version TEXT
);
-- Leasing walks pending runs in order; counts and closing use it too.
CREATE INDEX runs_by_state_position ON runs (state, position);
-- Expiry finds leased runs whose time has passed.
CREATE INDEX runs_by_state_expiry ON runs (state, expires_ms);

-- Every recorded attempt (AttemptRecord JSON); `class` is kept in its own
-- column so that status can count attempts by class without parsing JSON.
CREATE TABLE attempts (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id  TEXT    NOT NULL REFERENCES runs (run_id),
    attempt INTEGER NOT NULL,
    token   INTEGER NOT NULL,
    worker  TEXT    NOT NULL,
    class   TEXT    NOT NULL,
    record  TEXT    NOT NULL
);
CREATE INDEX attempts_by_run ON attempts (run_id, id);

-- Reports that arrived with a stale lease (DiscardedReport JSON).
CREATE TABLE discarded (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    record TEXT NOT NULL
);

-- The audit log.
CREATE TABLE events (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms  INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    run_id TEXT    NOT NULL DEFAULT '',
    detail TEXT    NOT NULL DEFAULT ''
);

-- The counts status reads, kept so that status is O(arms), not a scan of
-- the runs: runs per (arm, state, outcome), attempts per class, and the
-- discarded reports. `SqliteLedger` updates them in the transaction of
-- each change it counts (`count_runs`, `record_attempt`, `discard`);
-- `seed` writes each arm's pending count with its runs. `outcome` is ''
-- where the run has none (pending, leased). Rows whose n falls to 0 stay
-- (an arm's few buckets).
CREATE TABLE run_counts (
    arm_id  TEXT    NOT NULL REFERENCES arms (id),
    state   TEXT    NOT NULL,
    outcome TEXT    NOT NULL DEFAULT '',
    n       INTEGER NOT NULL,
    PRIMARY KEY (arm_id, state, outcome)
) WITHOUT ROWID;

CREATE TABLE attempt_counts (
    class TEXT    PRIMARY KEY,
    n     INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE discarded_count (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
);
INSERT INTO discarded_count (id, n) VALUES (1, 0);

PRAGMA user_version = 2;
